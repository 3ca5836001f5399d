//go:build race

package kernels

// raceEnabled says whether the tests run under the race detector, whose instrumentation
// and threads change what the process CPU clock reads around a kernel call.
const raceEnabled = true

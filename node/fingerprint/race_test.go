//go:build race

package fingerprint

// raceEnabled skips long training scenarios under the race detector, which slows them
// tenfold; their concurrency is covered by the shorter engine tests.
const raceEnabled = true

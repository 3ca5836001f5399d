//go:build race

package parallel

// raceEnabled skips the long convergence tests under the race detector, which makes them
// ten times slower and adds nothing: their concurrency is covered by the short tests.
const raceEnabled = true

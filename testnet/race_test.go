//go:build race

package testnet

// raceEnabled skips the long fault scenarios under the race detector: they exec real
// (uninstrumented) processes, so the race pass adds only load, which makes their timing
// (a join mid-job must be planned before the job ends) unreliable.
const raceEnabled = true

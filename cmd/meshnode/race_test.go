//go:build race

package main

// raceEnabled skips the exec'd testnet scenarios under the race detector: they run real
// (uninstrumented) processes against a wall-clock budget, so the race pass adds only load,
// which can starve the budget.
const raceEnabled = true

//go:build race

package main

// raceEnabled skips the tests that exec meshnode processes under the race detector (the
// testnet commands', the two-process join's, the leader kill's): the processes are the
// uninstrumented binary and the test's side only runs and reads them, so the race pass
// adds only load (and can starve a wall-clock budget, as --compare's). They run in
// go test ./... as before.
const raceEnabled = true

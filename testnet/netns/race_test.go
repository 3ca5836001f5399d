//go:build linux && race

package netns_test

// raceEnabled skips the namespace scenarios under the race detector: they exec real
// (uninstrumented) processes, so the race pass only adds load.
const raceEnabled = true

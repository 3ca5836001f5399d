//go:build linux && !race

package netns_test

const raceEnabled = false

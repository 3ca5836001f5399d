//go:build !unix

package fingerprint

import "time"

// processCPUTime is unknown here: 0 makes the profile keep its wall-clock rate.
func processCPUTime() time.Duration { return 0 }

//go:build !unix

package fingerprint

import "time"

// ProcessCPUTime is unknown here: 0 makes the profile keep its wall-clock rate and leaves
// the host load unmeasured.
func ProcessCPUTime() time.Duration { return 0 }

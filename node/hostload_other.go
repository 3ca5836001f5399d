//go:build !unix

package node

import "time"

// processCPUTime is unknown here: 0 leaves the host load unmeasured.
func processCPUTime() time.Duration { return 0 }

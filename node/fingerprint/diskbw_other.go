//go:build !linux

package fingerprint

import "os"

// dropCache cannot evict pages portably here: the read rate may include the page cache.
func dropCache(*os.File, int) {}

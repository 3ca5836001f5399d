//go:build !linux

package node

import "os"

// dropCache cannot evict pages portably here: the read rate may include the page cache.
func dropCache(*os.File, int) {}

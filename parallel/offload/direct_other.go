//go:build !linux

package offload

import (
	"errors"
	"os"
)

// setDirect: direct I/O is Linux's O_DIRECT; elsewhere the file goes through the page cache.
func setDirect(*os.File) error { return errors.New("direct I/O is only used on Linux") }

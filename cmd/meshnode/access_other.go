//go:build !unix

package main

import "os"

// canWriteDir reports whether this process may create files in the directory p: without
// access(2), by creating and removing a temporary file there.
func canWriteDir(p string) error {
	f, err := os.CreateTemp(p, ".meshnode-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

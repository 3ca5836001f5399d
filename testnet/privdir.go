package testnet

import (
	"errors"
	"fmt"
	"os"
)

// PrivateDir makes dir ready to hold a testnet: it creates it (and missing parents) with
// mode 0700, or checks that the existing one is the current user's and writable by no one
// else, and that its parent does not let other users replace it. A testnet's directory
// holds its nodes' API tokens and identity keys and a state file whose PIDs `testnet down`
// signals: a directory another user owns or may write into is refused with what to do.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("testnet dir: %w", err)
	}
	return checkPrivate(dir)
}

// checkPrivateIfExists is checkPrivate for a directory that may not exist (yet).
func checkPrivateIfExists(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return checkPrivate(dir)
}

//go:build !unix

package testnet

import (
	"fmt"
	"os"
)

// checkPrivate checks that dir is a directory; ownership and modes are ACLs here, which
// this package does not inspect.
func checkPrivate(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("testnet dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("testnet dir %s is not a directory", dir)
	}
	return nil
}

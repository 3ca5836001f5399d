//go:build unix

package testnet

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// checkPrivate refuses dir unless it is a directory (not a symbolic link) owned by the
// effective user, not writable by group or others, in a parent that others cannot write
// into (or that has the sticky bit, as /tmp, where only an entry's owner may rename it).
func checkPrivate(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("testnet dir: %w", err)
	}
	if st.Mode()&fs.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("testnet dir %s is not a directory but %s; name the directory itself with --dir", dir, st.Mode().Type())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("testnet dir %s is owned by uid %d, not by you (uid %d): its owner could read the nodes' API tokens and keys and plant processes for `testnet down` to signal; use a --dir of your own",
			dir, sys.Uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("testnet dir %s has mode %s: other users can write into it; run `chmod go-w %s` or use another --dir",
			dir, st.Mode().Perm(), dir)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	pst, err := os.Stat(parent)
	if err != nil {
		return fmt.Errorf("testnet dir %s: %w", dir, err)
	}
	if pst.Mode().Perm()&0o002 != 0 && pst.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("testnet dir %s: its parent %s has mode %s: anyone can replace the testnet dir; use a --dir in a directory of your own",
			dir, parent, pst.Mode().Perm())
	}
	return nil
}

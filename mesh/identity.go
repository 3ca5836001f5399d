package mesh

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/meshnode/meshnode/internal/fsutil"
)

// IdentityFile is the name of the key file inside a node's data directory.
const IdentityFile = "identity.key"

// LoadOrCreateIdentity reads the ed25519 key at path, or creates it (mode 0600, its
// directory 0700) when the file does not exist. created reports which happened. A key
// file readable by others is refused: the key is the node's identity in the mesh.
func LoadOrCreateIdentity(path string) (key crypto.PrivKey, created bool, err error) {
	key, err = LoadIdentity(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("create data dir: %w", err)
	}
	key, _, err = crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, false, fmt.Errorf("generate identity: %w", err)
	}
	raw, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("encode identity: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another process won the race: use its key
		key, err = LoadIdentity(path)
		return key, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("create identity: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		os.Remove(path)
		return nil, false, fmt.Errorf("write identity %s: %w", path, err)
	}
	// The key and its directory entry must both survive a crash: a node that lost its key
	// after announcing itself would come back as a stranger.
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("write identity %s: %w", path, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		return nil, false, fmt.Errorf("write identity %s: %w", path, err)
	}
	return key, true, nil
}

// LoadIdentity reads the key at path. It fails with an error wrapping fs.ErrNotExist when
// there is none.
func LoadIdentity(path string) (crypto.PrivKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("identity %s is readable by others (mode %s): run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if len(raw) > 4096 {
		return nil, fmt.Errorf("identity %s: %d bytes is not a key file", path, len(raw))
	}
	key, err := crypto.UnmarshalPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	return key, nil
}

package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/internal/fsutil"
)

// TokenFile is the API's bearer token in a node's data directory, created at the node's
// first start with mode 0600: whoever can read it may drive the node.
const TokenFile = "api.token"

// tokenBytes is the token's entropy; the file holds it hex-encoded.
const tokenBytes = 32

// maxTokenFile bounds what ReadToken reads.
const maxTokenFile = 1024

// LoadOrCreateToken returns the token stored in dataDir, creating it (mode 0600, written
// whole before it is visible) when there is none. A token file readable by others is
// refused: the token is a password.
func LoadOrCreateToken(dataDir string) (string, error) {
	tok, err := ReadToken(dataDir)
	if err == nil {
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("API token: %w", err)
	}
	tok = hex.EncodeToString(b)
	path := filepath.Join(dataDir, TokenFile)
	tmp, err := os.CreateTemp(dataDir, TokenFile+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("API token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("API token: %w", err)
	}
	_, werr := tmp.WriteString(tok + "\n")
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return "", fmt.Errorf("API token %s: %w", path, err)
	}
	// Link, not rename: if another process created the file meanwhile, its token wins.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return ReadToken(dataDir)
		}
		return "", fmt.Errorf("API token %s: %w", path, err)
	}
	if err := fsutil.SyncDir(dataDir); err != nil { // the new name must survive a crash too
		return "", fmt.Errorf("API token %s: %w", path, err)
	}
	return tok, nil
}

// ReadToken reads the token of the node whose data directory is dataDir. The error wraps
// os.ErrNotExist when the node never started there.
func ReadToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, TokenFile)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("API token: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("API token %s: %w", path, err)
	}
	if !st.Mode().IsRegular() || st.Size() > maxTokenFile {
		return "", fmt.Errorf("API token %s: not a token file (%s, %d bytes)", path, st.Mode(), st.Size())
	}
	if st.Mode().Perm()&0o077 != 0 && !windows() {
		return "", fmt.Errorf("API token %s: mode %s lets other users read it; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return "", fmt.Errorf("API token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("API token %s is empty; delete it and restart the node", path)
	}
	return tok, nil
}

package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// localReadChunk is how much of a local data file is read between two looks at the
// request's context.
const localReadChunk = 4 << 20

// localFiles reads the local data files a submitted job names. A path is accepted only if,
// with every symlink resolved, it lies under one of roots (also resolved) and is a regular
// file (or, for data.source, a directory holding train.bin and val.bin) of at most
// maxBytes. Every refusal is a model.ErrBadData naming the field, so that /etc/passwd,
// /dev/zero or a FIFO never reach the blob store.
type localFiles struct {
	roots    []string
	maxBytes int64
}

// newLocalFiles keeps the roots that exist, resolved; root "/" is refused unless
// configured, since then every path would be allowed.
func newLocalFiles(requestRoot string, configured []string, maxBytes int64) localFiles {
	l := localFiles{maxBytes: maxBytes}
	if l.maxBytes <= 0 {
		l.maxBytes = DefaultMaxDataBytes
	}
	add := func(dir string) {
		if real, err := filepath.EvalSymlinks(dir); err == nil && filepath.IsAbs(real) {
			l.roots = append(l.roots, real)
		}
	}
	if requestRoot != "" && filepath.IsAbs(requestRoot) && filepath.Clean(requestRoot) != string(filepath.Separator) {
		add(requestRoot)
	}
	for _, d := range configured {
		add(d)
	}
	return l
}

// resolve checks field's path against the roots and returns it resolved, with its info.
func (l localFiles) resolve(field, path string) (string, os.FileInfo, error) {
	if !filepath.IsAbs(path) {
		return "", nil, badData("%s: %q is not an absolute path (the CLI resolves relative paths against the spec's directory)", field, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil, badData("%s: %s does not exist on the submitting node (data paths are read where the job is submitted)", field, path)
		}
		return "", nil, badData("%s: %v", field, err)
	}
	if !l.allowed(real) {
		return "", nil, badData("%s: %s is outside the allowed data roots [%s]: local data must lie under the directory you submit from, or a --data-root of the node",
			field, path, strings.Join(l.roots, ", "))
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", nil, badData("%s: %v", field, err)
	}
	return real, st, nil
}

func (l localFiles) allowed(real string) bool {
	for _, root := range l.roots {
		rel, err := filepath.Rel(root, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}

// read returns the content of the regular file field names, reading in chunks that stop
// as soon as ctx ends.
func (l localFiles) read(ctx context.Context, field, path string) ([]byte, error) {
	f, size, err := l.open(field, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return l.readAll(ctx, field, path, f, size)
}

// open opens the regular file field names, of at most maxBytes (and MaxShardBytes), and
// returns it with its size; the caller closes it.
func (l localFiles) open(field, path string) (*os.File, int64, error) {
	real, st, err := l.resolve(field, path)
	if err != nil {
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, 0, badData("%s: %s is not a regular file (%s)", field, path, fileKind(st.Mode()))
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, 0, badData("%s: %v", field, err)
	}
	// The opened file is checked again: the path may have been swapped since resolve.
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, badData("%s: %s is not a regular file", field, path)
	}
	if st.Size() > l.maxBytes {
		f.Close()
		return nil, 0, badData("%s: %s has %d bytes, more than the node's limit of %d (--max-data-bytes)", field, path, st.Size(), l.maxBytes)
	}
	return f, st.Size(), nil
}

func (l localFiles) readAll(ctx context.Context, field, path string, f io.Reader, size int64) ([]byte, error) {
	out := make([]byte, 0, size)
	buf := make([]byte, localReadChunk)
	r := io.LimitReader(f, l.maxBytes+1)
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: read %s: %w", field, path, err)
		}
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if int64(len(out)) > l.maxBytes {
			return nil, badData("%s: %s grew past the node's limit of %d bytes while being read", field, path, l.maxBytes)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, badData("%s: %v", field, err)
		}
	}
}

// fileKind names what a non-regular file is, for the refusal's message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "mode " + m.String()
}

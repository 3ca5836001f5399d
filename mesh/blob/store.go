package blob

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Store keeps content-addressed blobs in one directory: the data in <dir>/<id> and
// the manifest in <dir>/<id>.manifest. Both are written to temporary files and renamed
// into place, data first, so a blob is present (Has) only once both are complete. It is
// safe for concurrent use, also by several processes sharing the directory.
type Store struct {
	dir       string
	chunkSize int

	mu        sync.Mutex
	manifests map[string]*Manifest // cache of manifests read or written
}

// OpenStore creates dir if needed and removes the temporary files a process killed while
// publishing, fetching or writing left there (the store's directory belongs to one node).
// chunkSize is the chunk size of blobs published here: zero means DefaultChunkSize; at
// most MaxChunkSize.
func OpenStore(dir string, chunkSize int) (*Store, error) {
	if chunkSize == 0 {
		chunkSize = DefaultChunkSize
	}
	if chunkSize < 0 || chunkSize > MaxChunkSize {
		return nil, fmt.Errorf("blob store: chunk size must be in [1, %d] (got %d)", MaxChunkSize, chunkSize)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	if err := sweepTemp(dir); err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return &Store{dir: dir, chunkSize: chunkSize, manifests: map[string]*Manifest{}}, nil
}

// tempPrefixes name the store's temporary files (see Publish, fetch and writeFile).
var tempPrefixes = []string{".publish-", ".fetch-", ".write-"}

// sweepTemp removes the store's temporary files from dir.
func sweepTemp(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		for _, p := range tempPrefixes {
			if e.Type().IsRegular() && strings.HasPrefix(e.Name(), p) {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
	}
	return nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) dataPath(id string) string     { return filepath.Join(s.dir, id) }
func (s *Store) manifestPath(id string) string { return filepath.Join(s.dir, id+".manifest") }

// Publish stores everything r yields as a blob and returns its ID. Publishing the same
// bytes twice gives the same ID and stores them once.
func (s *Store) Publish(ctx context.Context, r io.Reader) (string, error) {
	tmp, err := os.CreateTemp(s.dir, ".publish-*")
	if err != nil {
		return "", fmt.Errorf("blob store: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	m, err := s.writeChunks(ctx, tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("blob store: publish: %w", err)
	}
	return s.commit(tmp.Name(), m)
}

// writeChunks copies r to f chunk by chunk, hashing each chunk and the whole.
func (s *Store) writeChunks(ctx context.Context, f *os.File, r io.Reader) (*Manifest, error) {
	m := &Manifest{ChunkSize: s.chunkSize}
	whole := sha256.New()
	buf := make([]byte, s.chunkSize)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if len(m.Chunks) == MaxChunks {
				return nil, fmt.Errorf("more than %d chunks of %d bytes", MaxChunks, s.chunkSize)
			}
			m.Chunks = append(m.Chunks, sha256.Sum256(buf[:n]))
			whole.Write(buf[:n])
			m.Size += int64(n)
			if _, werr := f.Write(buf[:n]); werr != nil {
				return nil, werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	copy(m.Sum[:], whole.Sum(nil))
	return m, f.Sync()
}

// commit moves a complete, verified data file into place and writes its manifest.
func (s *Store) commit(tmpData string, m *Manifest) (string, error) {
	id := m.ID()
	if s.Has(id) {
		return id, nil
	}
	if err := os.Rename(tmpData, s.dataPath(id)); err != nil {
		return "", fmt.Errorf("blob store: %w", err)
	}
	if err := writeFileAtomic(s.manifestPath(id), m.Encode()); err != nil {
		return "", fmt.Errorf("blob store: manifest of %s: %w", id, err)
	}
	syncDir(s.dir)
	s.mu.Lock()
	s.manifests[id] = m
	s.mu.Unlock()
	return id, nil
}

// IDOf returns the ID data gets when published in this store, without storing it.
func (s *Store) IDOf(data []byte) string { return IDOf(data, s.chunkSize) }

// Has reports whether the blob is complete in the store.
func (s *Store) Has(id string) bool {
	_, err := s.Manifest(id)
	return err == nil
}

// Held is one blob of the store: its ID, its size and when it was stored.
type Held struct {
	ID       string
	Size     int64
	StoredAt time.Time
}

// List returns every blob the store holds (those with a manifest), in no particular order.
func (s *Store) List() ([]Held, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	var out []Held
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".manifest")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		m, err := s.Manifest(id)
		if err != nil {
			continue // a manifest that does not parse is not a blob this store serves
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Held{ID: id, Size: m.Size, StoredAt: info.ModTime()})
	}
	return out, nil
}

// Manifest returns the manifest of a stored blob, or an error matching ErrNotFound.
func (s *Store) Manifest(id string) (*Manifest, error) {
	if _, err := parseBlobID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	m := s.manifests[id]
	s.mu.Unlock()
	if m != nil {
		return m, nil
	}
	b, err := os.ReadFile(s.manifestPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	if m, err = DecodeManifest(b); err != nil {
		return nil, fmt.Errorf("blob store: %s: %w", s.manifestPath(id), err)
	}
	if m.ID() != id {
		return nil, fmt.Errorf("blob store: %s: %w", s.manifestPath(id), ErrCorrupt)
	}
	if st, err := os.Stat(s.dataPath(id)); err != nil || st.Size() != m.Size {
		return nil, fmt.Errorf("%w: %s: data file missing or of the wrong size", ErrNotFound, id)
	}
	s.mu.Lock()
	s.manifests[id] = m
	s.mu.Unlock()
	return m, nil
}

// Open opens a stored blob's data for reading.
func (s *Store) Open(id string) (*os.File, error) {
	if _, err := s.Manifest(id); err != nil {
		return nil, err
	}
	f, err := os.Open(s.dataPath(id))
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return f, nil
}

// ReadVerified returns a stored blob's bytes after checking them against its ID: an error
// matching ErrCorrupt when the data on disk no longer matches (Remove it and fetch it
// again), ErrNotFound when the store lacks it.
func (s *Store) ReadVerified(id string) ([]byte, error) {
	m, err := s.Manifest(id)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.dataPath(id))
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	if int64(len(b)) != m.Size || sha256.Sum256(b) != m.Sum {
		return nil, fmt.Errorf("blob store: %s: %w", id, ErrCorrupt)
	}
	return b, nil
}

// Remove deletes a stored blob (its manifest first, so it is never half present).
func (s *Store) Remove(id string) error {
	if _, err := parseBlobID(id); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.manifests, id)
	s.mu.Unlock()
	if err := os.Remove(s.manifestPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blob store: %w", err)
	}
	if err := os.Remove(s.dataPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blob store: %w", err)
	}
	return nil
}

// readChunk returns chunk i of a stored blob after checking it against its hash, so that
// disk corruption is never served.
func (s *Store) readChunk(id string, i int) ([]byte, error) {
	m, err := s.Manifest(id)
	if err != nil {
		return nil, err
	}
	if i < 0 || i >= len(m.Chunks) {
		return nil, fmt.Errorf("%w: chunk %d of %s (it has %d)", ErrNotFound, i, id, len(m.Chunks))
	}
	f, err := os.Open(s.dataPath(id))
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	defer f.Close()
	b := make([]byte, m.ChunkLen(i))
	if _, err := f.ReadAt(b, int64(i)*int64(m.ChunkSize)); err != nil {
		return nil, fmt.Errorf("blob store: read chunk %d of %s: %w", i, id, err)
	}
	if sha256.Sum256(b) != m.Chunks[i] {
		return nil, fmt.Errorf("blob store: chunk %d of %s: %w", i, id, ErrCorrupt)
	}
	return b, nil
}

// verifyFile checks that the file at path holds exactly the blob m describes.
func verifyFile(path string, m *Manifest) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if n != m.Size || [32]byte(h.Sum(nil)) != m.Sum {
		return ErrCorrupt
	}
	return nil
}

// writeFileAtomic writes b to a temporary file beside path, syncs it and renames it.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".write-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// syncDir makes renames in dir durable (best effort: not every platform can).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

package blob

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// A blob is stored and exchanged in chunks; its manifest lists them and its ID is the
// SHA-256 of the manifest's encoding, so a manifest fetched from anyone is verified by
// the ID alone, and every chunk by the manifest. The encoding, little-endian:
//
//	off  size  field
//	0    4     magic "MNBM"
//	4    1     version (1)
//	5    3     reserved, zero
//	8    8     total size in bytes
//	16   4     chunk size in bytes (every chunk but the last has exactly this size)
//	20   4     number of chunks = ceil(size / chunk size)
//	24   32    SHA-256 of the whole blob
//	56   32×n  SHA-256 of each chunk, in order
const (
	blobManifestHeader  = 56
	blobManifestVersion = 1

	// DefaultChunkSize is the chunk size of published blobs unless configured.
	DefaultChunkSize = 1 << 20
	// MaxChunkSize bounds a chunk, and so the memory one chunk request may take.
	MaxChunkSize = 16 << 20
	// MaxChunks bounds the chunks of one blob (and a manifest to 8 MiB): 256 GiB in
	// 1 MiB chunks.
	MaxChunks = 1 << 18
	// MaxManifestBytes is the largest valid manifest encoding.
	MaxManifestBytes = blobManifestHeader + 32*MaxChunks
)

var blobManifestMagic = [4]byte{'M', 'N', 'B', 'M'}

// Blob errors callers branch on.
var (
	// ErrBadID is returned for an ID that is not 64 lowercase hex digits.
	ErrBadID = errors.New("blob: malformed ID")
	// ErrNotFound is returned when the blob is not in the store, or no source has it.
	ErrNotFound = errors.New("blob: not found")
	// ErrManifest marks a malformed manifest.
	ErrManifest = errors.New("blob: malformed manifest")
	// ErrCorrupt is returned when data does not match its hash.
	ErrCorrupt = errors.New("blob: data does not match its hash")
)

// Manifest describes a blob: its size, chunking and hashes.
type Manifest struct {
	Size      int64
	ChunkSize int
	Sum       [32]byte   // SHA-256 of the whole blob
	Chunks    [][32]byte // SHA-256 of each chunk
}

// ChunkLen is the length of chunk i.
func (m *Manifest) ChunkLen(i int) int {
	if i == len(m.Chunks)-1 {
		return int(m.Size - int64(i)*int64(m.ChunkSize))
	}
	return m.ChunkSize
}

// Encode returns the manifest's canonical encoding.
func (m *Manifest) Encode() []byte {
	b := make([]byte, blobManifestHeader, blobManifestHeader+32*len(m.Chunks))
	copy(b, blobManifestMagic[:])
	b[4] = blobManifestVersion
	binary.LittleEndian.PutUint64(b[8:], uint64(m.Size))
	binary.LittleEndian.PutUint32(b[16:], uint32(m.ChunkSize))
	binary.LittleEndian.PutUint32(b[20:], uint32(len(m.Chunks)))
	copy(b[24:56], m.Sum[:])
	for _, c := range m.Chunks {
		b = append(b, c[:]...)
	}
	return b
}

// ID is the blob's ID: the hex SHA-256 of the manifest's encoding.
func (m *Manifest) ID() string {
	sum := sha256.Sum256(m.Encode())
	return hex.EncodeToString(sum[:])
}

// DecodeManifest decodes and checks a manifest: sizes within bounds and a chunk count
// that matches size and chunk size. It does not allocate past the input's length.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) < blobManifestHeader || len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrManifest, len(b))
	}
	if [4]byte(b[0:4]) != blobManifestMagic || b[4] != blobManifestVersion || b[5]|b[6]|b[7] != 0 {
		return nil, fmt.Errorf("%w: bad magic, version or reserved bytes", ErrManifest)
	}
	size := binary.LittleEndian.Uint64(b[8:])
	chunk := binary.LittleEndian.Uint32(b[16:])
	n := binary.LittleEndian.Uint32(b[20:])
	if chunk == 0 || chunk > MaxChunkSize || n > MaxChunks {
		return nil, fmt.Errorf("%w: chunk size %d, %d chunks", ErrManifest, chunk, n)
	}
	if want := (size + uint64(chunk) - 1) / uint64(chunk); want != uint64(n) {
		return nil, fmt.Errorf("%w: %d bytes in %d-byte chunks need %d chunks, manifest lists %d", ErrManifest, size, chunk, want, n)
	}
	if len(b) != blobManifestHeader+32*int(n) {
		return nil, fmt.Errorf("%w: %d bytes for %d chunks", ErrManifest, len(b), n)
	}
	m := &Manifest{Size: int64(size), ChunkSize: int(chunk), Chunks: make([][32]byte, n)}
	copy(m.Sum[:], b[24:56])
	for i := range m.Chunks {
		copy(m.Chunks[i][:], b[blobManifestHeader+32*i:])
	}
	return m, nil
}

// parseBlobID decodes a blob ID into its 32 bytes.
func parseBlobID(id string) ([32]byte, error) {
	var out [32]byte
	if len(id) != 64 {
		return out, fmt.Errorf("%w %q: want 64 hex digits", ErrBadID, id)
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return out, fmt.Errorf("%w %q: want lowercase hex digits", ErrBadID, id)
		}
	}
	_, err := hex.Decode(out[:], []byte(id))
	return out, err
}

// ValidID reports whether id is well-formed (64 lowercase hex digits).
func ValidID(id string) bool {
	_, err := parseBlobID(id)
	return err == nil
}

package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// A sharded corpus is a directory holding ShardManifestFile and the shards it lists: each
// shard a file of little-endian uint16 token ids named by the SHA-256 of its bytes plus
// ".tok", every shard but a split's last holding exactly ShardTokens ids. Documents are
// encoded one at a time and written out shard by shard, so neither writing nor training on
// a sharded corpus holds more than one shard's buffer, whatever the corpus's size.
const (
	// ShardManifestFile is the manifest's name in a sharded corpus directory.
	ShardManifestFile = "manifest.json"
	// ShardFormat is the manifest's format tag.
	ShardFormat = "meshnode-shards/1"
	// DefaultShardTokens is the tokens per shard: 16 Mi (32 MiB of uint16).
	DefaultShardTokens = 16 << 20
)

// ShardManifest describes a sharded corpus.
type ShardManifest struct {
	Format string `json:"format"`
	// Source is what was encoded.
	Source string `json:"source"`
	// Vocab is the vocabulary the ids lie below (≤ 65536: ids are uint16).
	Vocab int `json:"vocab"`
	// ShardTokens is the ids per shard (the last of each split may hold fewer).
	ShardTokens int `json:"shard_tokens"`
	// Train and Val are the splits' shards in order: document k went to Val when
	// k mod 20 = 19, else to Train.
	Train []ShardRef `json:"train"`
	Val   []ShardRef `json:"val"`
}

// ShardRef names one shard: the hex SHA-256 of its bytes and its token count.
type ShardRef struct {
	Hash   string `json:"hash"`
	Tokens int    `json:"tokens"`
}

// shardWriter buffers one shard of ids and writes it, named by its hash, when full.
type shardWriter struct {
	dir    string
	max    int
	buf    []byte
	shards []ShardRef
}

func (w *shardWriter) add(ids []uint32) error {
	for _, id := range ids {
		w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(id))
		if len(w.buf) == 2*w.max {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *shardWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	sum := sha256.Sum256(w.buf)
	h := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(w.dir, h+".tok"), w.buf, 0o644); err != nil {
		return err
	}
	w.shards = append(w.shards, ShardRef{Hash: h, Tokens: len(w.buf) / 2})
	w.buf = w.buf[:0]
	return nil
}

// WriteShards encodes source's documents (LoadDatasetWith's text sources) with opt.Encoder
// into a sharded corpus in dir: shardTokens ids per shard (≤ 0: DefaultShardTokens), each
// document followed by opt.EndOfText when ≥ 0, document k to validation when k mod 20 =
// 19. The vocabulary must fit uint16.
func WriteShards(dir, source string, opt TextOptions, shardTokens int) (*ShardManifest, error) {
	if opt.Encoder == nil {
		return nil, fmt.Errorf("%w: sharding needs a tokenizer", ErrBadData)
	}
	if v := opt.Encoder.VocabSize(); v > 1<<16 {
		return nil, fmt.Errorf("%w: a vocabulary of %d does not fit the shards' uint16 ids", ErrBadData, v)
	}
	if shardTokens <= 0 {
		shardTokens = DefaultShardTokens
	}
	st, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	docs, err := textDocuments(source, st, opt)
	if err != nil {
		return nil, err
	}
	return WriteShardsFrom(dir, source, docs, opt, shardTokens)
}

// WriteShardsFrom is WriteShards over the documents docs yields (one call of yield per
// document, in order), for a caller that reads them itself; source only names them.
func WriteShardsFrom(dir, source string, docs func(yield func([]byte) error) error, opt TextOptions, shardTokens int) (*ShardManifest, error) {
	if opt.Encoder == nil {
		return nil, fmt.Errorf("%w: sharding needs a tokenizer", ErrBadData)
	}
	if v := opt.Encoder.VocabSize(); v > 1<<16 {
		return nil, fmt.Errorf("%w: a vocabulary of %d does not fit the shards' uint16 ids", ErrBadData, v)
	}
	if shardTokens <= 0 {
		shardTokens = DefaultShardTokens
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	train := &shardWriter{dir: dir, max: shardTokens}
	val := &shardWriter{dir: dir, max: shardTokens}
	var ids []uint32
	k := 0
	err := docs(func(b []byte) error {
		ids = opt.Encoder.AppendEncode(ids[:0], b)
		if opt.EndOfText >= 0 {
			ids = append(ids, uint32(opt.EndOfText))
		}
		w := train
		if k%20 == 19 {
			w = val
		}
		k++
		return w.add(ids)
	})
	if err == nil {
		err = train.flush()
	}
	if err == nil {
		err = val.flush()
	}
	if err != nil {
		return nil, err
	}
	m := &ShardManifest{Format: ShardFormat, Source: source, Vocab: opt.Encoder.VocabSize(), ShardTokens: shardTokens, Train: train.shards, Val: val.shards}
	if len(m.Train) == 0 || len(m.Val) == 0 {
		return nil, fmt.Errorf("%w: %s: %d documents give an empty split (validation takes every 20th document: give at least 20)", ErrBadData, source, k)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	return m, os.WriteFile(filepath.Join(dir, ShardManifestFile), append(b, '\n'), 0o644)
}

// IsShardedCorpus reports whether dir holds a shard manifest.
func IsShardedCorpus(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ShardManifestFile))
	return err == nil
}

// LoadShards opens the sharded corpus in dir. Each shard is checked against its hash and
// its ids against the manifest's vocabulary in one streamed pass, then read on demand: a
// window costs one pread per shard it touches.
func LoadShards(dir string) (*Dataset, error) {
	path := filepath.Join(dir, ShardManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	var m ShardManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadData, path, err)
	}
	if m.Format != ShardFormat || m.Vocab < 1 || m.Vocab > 1<<16 {
		return nil, fmt.Errorf("%w: %s: format %q, vocab %d: want %q and a vocabulary of 1…65536", ErrBadData, path, m.Format, m.Vocab, ShardFormat)
	}
	ds := &Dataset{Source: dir, Vocab: m.Vocab}
	if ds.Train, err = openShardSet(dir, m.Train, m.Vocab); err == nil {
		ds.Val, err = openShardSet(dir, m.Val, m.Vocab)
	}
	return ds, err
}

// shardSet is a split made of shard files, addressed as one run of tokens.
type shardSet struct {
	parts []Tokens
	start []int // start[i] is the global offset of parts[i]; start[len] is the total
}

func openShardSet(dir string, refs []ShardRef, vocab int) (Tokens, error) {
	if len(refs) == 0 {
		return Tokens{}, fmt.Errorf("%w: %s: a split lists no shards", ErrBadData, filepath.Join(dir, ShardManifestFile))
	}
	s := &shardSet{start: []int{0}}
	for _, r := range refs {
		t, err := openShard(filepath.Join(dir, r.Hash+".tok"), r, vocab)
		if err != nil {
			return Tokens{}, err
		}
		s.parts = append(s.parts, t)
		s.start = append(s.start, s.start[len(s.start)-1]+r.Tokens)
	}
	return Tokens{shards: s}, nil
}

func openShard(path string, r ShardRef, vocab int) (Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return Tokens{}, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	st, err := f.Stat()
	if err != nil {
		err = fmt.Errorf("%w: %v", ErrBadData, err)
	} else {
		err = checkShard(ShardReader{Ref: r, Name: path, R: f, Size: st.Size()}, vocab)
	}
	if err != nil {
		f.Close()
		return Tokens{}, err
	}
	return FileTokens(f, 0, r.Tokens), nil
}

func (s *shardSet) len() int { return s.start[len(s.start)-1] }

// window copies tokens [off, off+len(dst)), across shard boundaries where it spans them.
func (s *shardSet) window(dst []int32, off int) error {
	i := sort.SearchInts(s.start, off+1) - 1
	for len(dst) > 0 {
		local := off - s.start[i]
		n := min(len(dst), s.start[i+1]-off)
		if err := s.parts[i].Window(dst[:n], local); err != nil {
			return err
		}
		dst, off, i = dst[n:], off+n, i+1
	}
	return nil
}

// ReplicaShards is the training shards replica r of R trains on, out of n: shard i when
// i mod R = r, or, with fewer shards than replicas, shard r mod n alone. Every shard is
// someone's when n ≥ R, and the assignment depends only on (n, r, R), so every node of a
// replica, and the planner that records it, computes the same one.
func ReplicaShards(n, r, R int) []int {
	if n <= 0 || R <= 0 || r < 0 || r >= R {
		return nil
	}
	if n < R {
		return []int{r % n}
	}
	var out []int
	for i := r; i < n; i += R {
		out = append(out, i)
	}
	return out
}

// ShardReader is an opened shard: its reference and the file holding its bytes.
type ShardReader struct {
	Ref  ShardRef
	Name string // the file's name, for errors
	R    io.ReaderAt
	Size int64
}

// ShardTokens checks each shard against its hash, token count and vocab in one streamed
// pass and returns them as one run of tokens read on demand (a split made of shards).
func ShardTokens(parts []ShardReader, vocab int) (Tokens, error) {
	if len(parts) == 0 {
		return Tokens{}, fmt.Errorf("%w: a split of no shards", ErrBadData)
	}
	s := &shardSet{start: []int{0}}
	for _, p := range parts {
		if err := checkShard(p, vocab); err != nil {
			return Tokens{}, err
		}
		s.parts = append(s.parts, FileTokens(p.R, 0, p.Ref.Tokens))
		s.start = append(s.start, s.start[len(s.start)-1]+p.Ref.Tokens)
	}
	return Tokens{shards: s}, nil
}

// checkShard hashes p's bytes and checks its ids below vocab, a chunk at a time.
func checkShard(p ShardReader, vocab int) error {
	if p.Size != 2*int64(p.Ref.Tokens) {
		return fmt.Errorf("%w: %s: %d bytes, the manifest lists %d tokens", ErrBadData, p.Name, p.Size, p.Ref.Tokens)
	}
	h := sha256.New()
	buf := make([]byte, scanChunk)
	for off := int64(0); off < p.Size; off += scanChunk {
		b := buf[:min(scanChunk, p.Size-off)]
		if _, err := p.R.ReadAt(b, off); err != nil && !(errors.Is(err, io.EOF) && off+int64(len(b)) == p.Size) {
			return fmt.Errorf("%w: read %s: %v", ErrBadData, p.Name, err)
		}
		for i := 0; i+1 < len(b); i += 2 {
			if v := int(binary.LittleEndian.Uint16(b[i:])); v >= vocab {
				return fmt.Errorf("%w: %s holds token id %d, not below the vocabulary size %d", ErrBadData, p.Name, v, vocab)
			}
		}
		h.Write(b)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.Ref.Hash {
		return fmt.Errorf("%w: %s hashes to %s, the manifest lists %s", ErrBadData, p.Name, got, p.Ref.Hash)
	}
	return nil
}

package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

// A sharded job dataset is a manifest blob (its ID is the job's data.blob) listing one blob
// per shard of a sharded corpus (model.ShardManifest) and, optionally, one for its
// tokenizer.json. A node fetches the manifest, then only the shards its replica trains
// on (the plan's data_shards) and every validation shard, checking each shard's bytes
// against its SHA-256 before training on it.
const (
	// jobShardsFormat tags the manifest blob.
	jobShardsFormat = "meshnode-job-shards/1"
	// maxJobShardsBytes bounds the manifest blob, checked before it is read: 2^16 training
	// shards at about 170 bytes each, and room for the validation shards.
	maxJobShardsBytes = 16 << 20
	// maxValShards bounds the validation shards, which every node fetches.
	maxValShards = 1 << 12
	// MaxShardBytes is the per-shard bound of a job's sharded dataset (4 GiB, 2 Gi uint16
	// ids), whatever the corpus's total; the submitting node also holds each shard file to
	// its --max-data-bytes.
	MaxShardBytes  = 4 << 30
	maxShardTokens = MaxShardBytes / 2
)

// jobShards is the manifest blob's JSON.
type jobShards struct {
	Format string `json:"format"`
	// Source is the sharded corpus's path on the submitting node, for the record.
	Source string `json:"source"`
	Vocab  int    `json:"vocab"`
	// Tokenizer is the blob of the corpus's tokenizer.json; empty when it has none.
	Tokenizer string         `json:"tokenizer,omitempty"`
	Train     []shardBlobRef `json:"train"`
	Val       []shardBlobRef `json:"val"`
}

// shardBlobRef is one shard: its content hash and token count (model.ShardRef) and the
// blob that holds its bytes.
type shardBlobRef struct {
	model.ShardRef
	Blob string `json:"blob"`
}

var shardHashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// decodeJobShards parses a manifest blob of at most maxJobShardsBytes and checks every
// field: format, vocabulary, counts, hashes, blob IDs, token counts within MaxShardBytes.
func decodeJobShards(b []byte) (*jobShards, error) {
	if len(b) > maxJobShardsBytes {
		return nil, fmt.Errorf("%w: a shard manifest of %d bytes, more than %d", model.ErrBadData, len(b), maxJobShardsBytes)
	}
	var m jobShards
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: shard manifest: %v", model.ErrBadData, err)
	}
	switch {
	case m.Format != jobShardsFormat:
		return nil, fmt.Errorf("%w: shard manifest format %.40q, want %q", model.ErrBadData, m.Format, jobShardsFormat)
	case m.Vocab < 1 || m.Vocab > 1<<16:
		return nil, fmt.Errorf("%w: shard manifest vocabulary %d, want 1…65536", model.ErrBadData, m.Vocab)
	case len(m.Source) > maxDatasetSource:
		return nil, fmt.Errorf("%w: shard manifest source of %d bytes", model.ErrBadData, len(m.Source))
	case m.Tokenizer != "" && !blob.ValidID(m.Tokenizer):
		return nil, fmt.Errorf("%w: shard manifest tokenizer %.80q is not a blob ID", model.ErrBadData, m.Tokenizer)
	case len(m.Train) < 1 || len(m.Train) > jobspec.MaxTrainShards || len(m.Val) < 1 || len(m.Val) > maxValShards:
		return nil, fmt.Errorf("%w: shard manifest lists %d training and %d validation shards (want 1…%d and 1…%d)", model.ErrBadData, len(m.Train), len(m.Val), jobspec.MaxTrainShards, maxValShards)
	}
	for _, s := range append(append([]shardBlobRef(nil), m.Train...), m.Val...) {
		if !shardHashPattern.MatchString(s.Hash) || !blob.ValidID(s.Blob) || s.Tokens < 1 || int64(s.Tokens) > maxShardTokens {
			return nil, fmt.Errorf("%w: shard manifest entry %.80q/%.80q of %d tokens (want hex SHA-256, a blob ID, 1…%d tokens)", model.ErrBadData, s.Hash, s.Blob, s.Tokens, maxShardTokens)
		}
	}
	return &m, nil
}

// blobs is every blob the manifest names: shards and tokenizer.
func (m *jobShards) blobs() []string {
	var out []string
	for _, s := range append(append([]shardBlobRef(nil), m.Train...), m.Val...) {
		out = append(out, s.Blob)
	}
	if m.Tokenizer != "" {
		out = append(out, m.Tokenizer)
	}
	return out
}

// publishShards publishes the sharded corpus d.Source names (a directory with
// model.ShardManifestFile, under the data roots): each shard file as its own blob, after
// checking it is a regular file of at most the node's --max-data-bytes (the per-shard
// bound) whose bytes hash to the manifest's entry, streamed, never read whole; its
// tokenizer.json, if any, as a blob; and the manifest of them all. It returns the
// manifest's blob ID and the training shard count. The vocabulary must fit vocab.
func (s *datasets) publishShards(ctx context.Context, d jobspec.Data, vocab int, files localFiles, dir string) (string, int, error) {
	const field = "data.source"
	if d.Tokenizer != "" {
		return "", 0, badData("data.tokenizer: %s is a sharded corpus, already tokenized: leave data.tokenizer out", d.Source)
	}
	b, err := files.read(ctx, field, filepath.Join(dir, model.ShardManifestFile))
	if err != nil {
		return "", 0, err
	}
	var cm model.ShardManifest
	if err := json.Unmarshal(b, &cm); err != nil || cm.Format != model.ShardFormat {
		return "", 0, badData("%s: %s: not a %s manifest (%v)", field, filepath.Join(d.Source, model.ShardManifestFile), model.ShardFormat, err)
	}
	if cm.Vocab < 1 || cm.Vocab > vocab {
		return "", 0, badData("%s: %s holds a vocabulary of %d, model.vocab is %d: set model.vocab to at least %d", field, d.Source, cm.Vocab, vocab, cm.Vocab)
	}
	m := &jobShards{Format: jobShardsFormat, Source: d.Source, Vocab: cm.Vocab}
	for _, split := range []struct {
		refs []model.ShardRef
		out  *[]shardBlobRef
	}{{cm.Train, &m.Train}, {cm.Val, &m.Val}} {
		for _, r := range split.refs {
			id, err := s.publishShard(ctx, files, dir, r)
			if err != nil {
				return "", 0, err
			}
			*split.out = append(*split.out, shardBlobRef{ShardRef: r, Blob: id})
		}
	}
	if tok := filepath.Join(dir, "tokenizer.json"); fileExists(tok) {
		tb, err := files.read(ctx, field, tok)
		if err != nil {
			return "", 0, err
		}
		if _, err := tokenizer.Parse(tb, tok); err != nil {
			return "", 0, badData("%s: %v", field, err)
		}
		if m.Tokenizer, err = s.blobs.Publish(ctx, bytes.NewReader(tb)); err != nil {
			return "", 0, fmt.Errorf("publish %s: %w", tok, err)
		}
	}
	enc, _ := json.Marshal(m)
	if _, err := decodeJobShards(enc); err != nil {
		return "", 0, badData("%s: %s: %v", field, d.Source, err)
	}
	id, err := s.blobs.Publish(ctx, bytes.NewReader(enc))
	if err != nil {
		return "", 0, fmt.Errorf("publish the shard manifest of %s: %w", d.Source, err)
	}
	s.n.log.Info("published sharded dataset", "source", d.Source, "blob", id, "train_shards", len(m.Train), "val_shards", len(m.Val))
	return id, len(m.Train), nil
}

// publishShard streams one shard file into the blob store, hashing it on the way; a file
// whose bytes are not the manifest's is removed again and refused, naming it.
func (s *datasets) publishShard(ctx context.Context, files localFiles, dir string, r model.ShardRef) (string, error) {
	const field = "data.source"
	if !shardHashPattern.MatchString(r.Hash) {
		return "", badData("%s: %s lists shard %.80q, not a hex SHA-256", field, filepath.Join(dir, model.ShardManifestFile), r.Hash)
	}
	path := filepath.Join(dir, r.Hash+".tok")
	f, size, err := files.open(field, path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if size != 2*int64(r.Tokens) {
		return "", badData("%s: shard %s has %d bytes, the manifest lists %d tokens", field, path, size, r.Tokens)
	}
	h := sha256.New()
	id, err := s.blobs.Publish(ctx, io.TeeReader(io.LimitReader(f, size), h))
	if err != nil {
		return "", fmt.Errorf("%s: publish shard %s: %w", field, path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != r.Hash {
		s.blobs.Store().Remove(id)
		return "", badData("%s: shard %s hashes to %s, not the %s its name and the manifest give", field, path, got, r.Hash)
	}
	return id, nil
}

// loadShards builds the dataset of manifest m: training shards train (indices into
// m.Train; nil: all of them) and every validation shard, each fetched if this node lacks
// it and checked against its hash. The files stay open for the dataset's life.
func (s *datasets) loadShards(ctx context.Context, m *jobShards, train []int, holders []peer.ID) (*model.Dataset, error) {
	if train == nil {
		for i := range m.Train {
			train = append(train, i)
		}
	}
	var picked []shardBlobRef
	for _, i := range train {
		if i < 0 || i >= len(m.Train) {
			return nil, fmt.Errorf("%w: the plan assigns training shard %d of %d", model.ErrBadData, i, len(m.Train))
		}
		picked = append(picked, m.Train[i])
	}
	ds := &model.Dataset{Source: m.Source, Vocab: m.Vocab}
	var err error
	if ds.Train, err = s.shardSplit(ctx, picked, m.Vocab, holders); err != nil {
		return nil, err
	}
	if ds.Val, err = s.shardSplit(ctx, m.Val, m.Vocab, holders); err != nil {
		return nil, err
	}
	if m.Tokenizer != "" {
		if err := s.blobs.Fetch(ctx, m.Tokenizer, s.sources(holders)); err != nil {
			return nil, fmt.Errorf("fetch the dataset's tokenizer: %w", err)
		}
		if ds.Tokenizer, err = s.blobs.Store().ReadVerified(m.Tokenizer); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// shardTokenizer fetches the manifest blob id and its tokenizer, not its shards: a dataset
// with only Tokenizer set (nil when the sharded corpus has none).
func (s *datasets) shardTokenizer(ctx context.Context, id string) (*model.Dataset, error) {
	if err := s.blobs.Fetch(ctx, id, s.sources(nil)); err != nil {
		return nil, err
	}
	m, err := s.readJobShards(id)
	if err != nil || m == nil || m.Tokenizer == "" {
		return &model.Dataset{}, err
	}
	if err := s.blobs.Fetch(ctx, m.Tokenizer, s.sources(nil)); err != nil {
		return nil, err
	}
	tok, err := s.blobs.Store().ReadVerified(m.Tokenizer)
	return &model.Dataset{Tokenizer: tok}, err
}

// shardSplit fetches refs' blobs and opens them as one split.
func (s *datasets) shardSplit(ctx context.Context, refs []shardBlobRef, vocab int, holders []peer.ID) (model.Tokens, error) {
	var parts []model.ShardReader
	fail := func(err error) (model.Tokens, error) {
		for _, p := range parts {
			p.R.(*os.File).Close()
		}
		return model.Tokens{}, err
	}
	for _, r := range refs {
		if err := s.blobs.Fetch(ctx, r.Blob, s.sources(holders)); err != nil {
			return fail(fmt.Errorf("fetch shard %s: %w", r.Hash, err))
		}
		f, err := s.blobs.Open(r.Blob)
		if err != nil {
			return fail(err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return fail(err)
		}
		parts = append(parts, model.ShardReader{Ref: r.ShardRef, Name: "shard " + r.Hash + " (blob " + r.Blob + ")", R: f, Size: st.Size()})
	}
	toks, err := model.ShardTokens(parts, vocab)
	if err != nil {
		return fail(err)
	}
	return toks, nil
}

// parts is the blobs the shard manifest blob id lists, if this node holds it; nil
// otherwise, and for a packed dataset.
func (s *datasets) parts(id string) []string {
	if !s.blobs.Has(id) {
		return nil
	}
	m, err := s.readJobShards(id)
	if err != nil || m == nil {
		return nil
	}
	return m.blobs()
}

// partOfLiveDataset reports whether hash is a shard (or the tokenizer) of the sharded
// dataset of a job that has not ended, as the dataset's manifest blob, held here, lists
// it: the manifest is replicated first, so a member asked to hold a shard can check it.
func (s *datasets) partOfLiveDataset(jobs []consensus.Job, hash string) bool {
	for _, j := range jobs {
		if j.Spec.Data.TrainShards > 0 && !j.Status.Terminal() && slices.Contains(s.parts(j.Spec.Data.Blob), hash) {
			return true
		}
	}
	return false
}

// readJobShards reads manifest blob id from the local store if it is a shard manifest:
// nil, nil for a packed dataset blob.
func (s *datasets) readJobShards(id string) (*jobShards, error) {
	f, err := s.blobs.Open(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 1)
	if _, err := f.ReadAt(head, 0); err != nil || head[0] != '{' {
		return nil, nil // a packed dataset ("MNDS") or an empty blob: decodeDatasetAt's to judge
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxJobShardsBytes {
		return nil, fmt.Errorf("%w: a shard manifest of %d bytes, more than %d", model.ErrBadData, st.Size(), maxJobShardsBytes)
	}
	b, err := s.blobs.Store().ReadVerified(id)
	if err != nil {
		return nil, err
	}
	return decodeJobShards(b)
}

// shardAtSubmit encodes the text data.source with data.tokenizer into a sharded corpus of
// d.ShardTokens tokens per shard (model.WriteShardsFrom: one document and one shard in
// memory at a time) in a temporary directory of the data dir, and publishes it shard by
// shard. Every file goes through files' root and per-file size checks; the corpus's total
// is not limited. It returns the manifest blob, the training shard count and the
// vocabulary (the tokenizer's; a vocab other than 0 must equal it).
func (s *datasets) shardAtSubmit(ctx context.Context, d jobspec.Data, vocab int, files localFiles) (string, int, int, error) {
	tokJSON, err := files.read(ctx, "data.tokenizer", d.Tokenizer)
	if err != nil {
		return "", 0, 0, err
	}
	tok, err := tokenizer.Parse(tokJSON, d.Tokenizer)
	if err != nil {
		return "", 0, 0, badData("data.tokenizer: %v", err)
	}
	switch n := tok.VocabSize(); {
	case n > jobspec.MaxVocab:
		return "", 0, 0, badData("data.tokenizer: %s has a vocabulary of %d, more than model.vocab's limit of %d", d.Tokenizer, n, jobspec.MaxVocab)
	case vocab != 0 && vocab != n:
		return "", 0, 0, badData("model.vocab: %d does not match data.tokenizer %s, whose vocabulary is %d (leave model.vocab out to use it)", vocab, d.Tokenizer, n)
	}
	tmp, err := os.MkdirTemp(s.n.cfg.DataDir, "shard-at-submit-")
	if err != nil {
		return "", 0, 0, err
	}
	defer os.RemoveAll(tmp) // the blobs hold copies
	opt := model.TextOptions{Encoder: tok, EndOfText: -1, TextField: d.TextField}
	if id, ok := tok.EndOfText(); ok {
		opt.EndOfText = int(id)
	}
	docs := func(yield func([]byte) error) error { return readDocuments(ctx, d, files, false, yield) }
	if _, err := model.WriteShardsFrom(tmp, d.Source, docs, opt, d.ShardTokens); err != nil {
		if errors.Is(err, model.ErrBadData) {
			return "", 0, 0, badData("data.source: %s", strings.TrimPrefix(err.Error(), model.ErrBadData.Error()+": "))
		}
		return "", 0, 0, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "tokenizer.json"), tokJSON, 0o600); err != nil {
		return "", 0, 0, err
	}
	sharded := jobspec.Data{Source: d.Source}
	id, n, err := s.publishShards(ctx, sharded, tok.VocabSize(), newLocalFiles("", []string{tmp}, MaxShardBytes), tmp)
	return id, n, tok.VocabSize(), err
}

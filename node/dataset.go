package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/model"
)

// BlobDir is the directory of the node's content-addressed blobs, under its data dir.
const BlobDir = "blobs"

// datasets publishes the corpora of jobs submitted here as blobs, fetches and decodes
// the blobs of jobs this node runs, and keeps one decoded copy of each in memory.
type datasets struct {
	n     *Node
	blobs *blob.Service

	local *localDatasets // the datasets the operator exposed (--local-data)

	mu      sync.Mutex
	loaded  map[string]*datasetLoad // blob ID → decoded dataset (or its load in progress)
	builtin map[string]string       // builtin corpus → its blob ID (packed once per process)
}

type datasetLoad struct {
	done chan struct{}
	ds   *model.Dataset
	err  error
}

// newDatasets opens the blob store in the data dir and serves it on the mesh.
func newDatasets(n *Node) (*datasets, error) {
	store, err := blob.OpenStore(filepath.Join(n.cfg.DataDir, BlobDir), 0)
	if err != nil {
		return nil, err
	}
	cfg := blob.Config{Logger: n.log, AcceptPull: n.acceptReplica, AllowServe: n.allowServe}
	if n.cfg.Consensus.Disabled {
		cfg.AllowServe = nil // no jobs to decide by: a node without a control plane serves what it holds to members
	}
	blobs := blob.NewService(n.mesh, store, cfg)
	return &datasets{n: n, blobs: blobs, local: &localDatasets{paths: n.cfg.LocalData},
		loaded: map[string]*datasetLoad{}, builtin: map[string]string{}}, nil
}

// Blobs is the node's blob service: its store and the blob protocol.
func (n *Node) Blobs() *blob.Service { return n.data.blobs }

// PublishDataset packs the corpus d names, on this node, into a dataset blob and returns
// its ID: builtin:gostd (packed once per process), a text file (split 95/5 as
// model.LoadDataset does), a directory or train.bin with nanoGPT's train.bin/val.bin, or a
// data.train/data.val pair of uint16 token files checked against vocab. Local paths must
// be regular files under dataRoot (the submitter's directory; empty: none) or one of the
// node's Config.DataRoots, at most Config.MaxDataBytes each; they are read until ctx
// ends. A refused, missing or unusable path is an error wrapping model.ErrBadData that
// names the field and the path.
//
// Text (a text file, a directory of text files, a .jsonl file) is encoded with
// data.tokenizer when set, whose tokenizer.json travels in the blob; vocab 0 then means
// the tokenizer's vocabulary, and the vocabulary the blob holds is returned.
func (n *Node) PublishDataset(ctx context.Context, d jobspec.Data, vocab int, dataRoot string) (string, int, error) {
	return n.data.publish(ctx, d, vocab, newLocalFiles(dataRoot, n.cfg.DataRoots, n.cfg.MaxDataBytes))
}

// PublishJobData publishes the corpus of a submitted job and returns its data section as
// the job records it: a sharded corpus directory (model.ShardManifestFile), or a text
// source with data.tokenizer and data.shard_tokens (sharded here first), as one blob per
// shard plus a manifest blob (data.blob) and its training shard count
// (data.train_shards); anything else as PublishDataset does. The vocabulary returned is
// PublishDataset's.
func (n *Node) PublishJobData(ctx context.Context, d jobspec.Data, vocab int, dataRoot string) (jobspec.Data, int, error) {
	files := newLocalFiles(dataRoot, n.cfg.DataRoots, n.cfg.MaxDataBytes)
	if d.ShardTokens > 0 && d.Tokenizer != "" {
		var err error
		d.Blob, d.TrainShards, vocab, err = n.data.shardAtSubmit(ctx, d, vocab, files)
		return d, vocab, err
	}
	if d.Source != "" && d.Source != jobspec.BuiltinGoStd && d.Local == "" {
		if real, st, err := files.resolve("data.source", d.Source); err == nil && st.IsDir() && model.IsShardedCorpus(real) {
			d.Blob, d.TrainShards, err = n.data.publishShards(ctx, d, vocab, files, real)
			return d, vocab, err
		}
	}
	var err error
	d.Blob, vocab, err = n.data.publish(ctx, d, vocab, files)
	return d, vocab, err
}

// LoadDataset returns the dataset in blob blobID, fetching the blob first when this node
// does not hold it: from holders in order, then from every other live peer. The blob is
// verified chunk by chunk and whole; the decoded dataset is cached, one copy per blob. A
// sharded dataset is loaded whole (LoadDatasetShards loads part of it).
func (n *Node) LoadDataset(ctx context.Context, blobID string, holders []peer.ID) (*model.Dataset, error) {
	return n.data.load(ctx, blobID, nil, holders)
}

// LoadDatasetShards is LoadDataset for a replica of a sharded dataset: it fetches the
// manifest, the training shards train (indices in the manifest; nil: all) and the
// validation shards, and nothing else; each shard is checked against its SHA-256. For a
// dataset that is one blob, train is ignored.
func (n *Node) LoadDatasetShards(ctx context.Context, blobID string, train []int, holders []peer.ID) (*model.Dataset, error) {
	return n.data.load(ctx, blobID, train, holders)
}

func (s *datasets) publish(ctx context.Context, d jobspec.Data, vocab int, files localFiles) (string, int, error) {
	if d.Local != "" {
		return "", vocab, nil // every node trains on its own: nothing to publish
	}
	if d.Source == jobspec.BuiltinGoStd {
		s.mu.Lock()
		id := s.builtin[d.Source]
		s.mu.Unlock()
		if id != "" && s.blobs.Has(id) {
			return id, vocab, nil
		}
	}
	p, err := s.pack(ctx, d, vocab, files)
	if err != nil {
		return "", 0, err
	}
	id, err := s.blobs.Publish(ctx, p.reader())
	if err != nil {
		return "", 0, fmt.Errorf("publish dataset %s: %w", p.source, err)
	}
	if d.Source == jobspec.BuiltinGoStd {
		s.mu.Lock()
		s.builtin[d.Source] = id
		s.mu.Unlock()
	}
	s.n.log.Info("published dataset", "source", p.source, "blob", id, "train_tokens", len(p.train)/p.width(),
		"val_tokens", len(p.val)/p.width())
	if p.tokenizer != nil {
		vocab = p.vocab
	}
	return id, vocab, nil
}

// pack reads the corpus d names into its two splits.
func (s *datasets) pack(ctx context.Context, d jobspec.Data, vocab int, files localFiles) (*packedDataset, error) {
	switch {
	case d.Source == jobspec.BuiltinGoStd:
		root, err := model.GoRoot()
		if err != nil {
			return nil, fmt.Errorf("data.source: %w", err)
		}
		train, val, err := model.GoStdCorpus(root)
		if err != nil {
			return nil, fmt.Errorf("data.source: %w", err)
		}
		return &packedDataset{source: d.Source, vocab: 256, train: train, val: val}, nil
	case d.Source != "":
		return s.packSource(ctx, d, vocab, files)
	}
	_, _, terr := files.resolve("data.train", d.Train)
	_, _, verr := files.resolve("data.val", d.Val)
	if err := errors.Join(terr, verr); err != nil {
		return nil, err
	}
	train, err := readTokenFile(ctx, files, "data.train", d.Train, vocab)
	if err != nil {
		return nil, err
	}
	val, err := readTokenFile(ctx, files, "data.val", d.Val, vocab)
	if err != nil {
		return nil, err
	}
	return &packedDataset{source: d.Train + "," + d.Val, vocab: vocab, u16: true, train: train, val: val}, nil
}

// packSource reads data.source: a text file, or a directory or train.bin of a nanoGPT
// train.bin/val.bin pair (model.LoadDataset's rules); text collections and anything with
// data.tokenizer go to packText.
func (s *datasets) packSource(ctx context.Context, d jobspec.Data, vocab int, files localFiles) (*packedDataset, error) {
	const field = "data.source"
	source := d.Source
	real, st, err := files.resolve(field, source)
	if err != nil {
		return nil, err
	}
	if st.IsDir() && model.IsShardedCorpus(real) {
		return nil, badData("%s: %s is a sharded corpus (manifest.json): it is published shard by shard at submit (PublishJobData), not packed into one blob", field, source)
	}
	if isTextSource(d, real, st.IsDir()) {
		return s.packText(ctx, d, vocab, files)
	}
	if st.IsDir() || filepath.Base(real) == "train.bin" {
		dir := real
		if !st.IsDir() {
			dir = filepath.Dir(real)
		}
		train, err := readTokenFile(ctx, files, field, filepath.Join(dir, "train.bin"), vocab)
		if err != nil {
			return nil, err
		}
		val, err := readTokenFile(ctx, files, field, filepath.Join(dir, "val.bin"), vocab)
		if err != nil {
			return nil, err
		}
		u16 := vocab > 256
		return &packedDataset{source: source, vocab: vocab, u16: u16, train: repackTokens(train, u16), val: repackTokens(val, u16)}, nil
	}
	b, err := files.read(ctx, field, source)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, badData("%s: %s is empty", field, source)
	}
	cut := len(b) - len(b)*5/100
	return &packedDataset{source: source, vocab: 256, train: b[:cut], val: b[cut:]}, nil
}

// repackTokens turns little-endian uint16 tokens into the packed width (1 byte when the
// vocabulary fits one).
func repackTokens(b []byte, u16 bool) []byte {
	if u16 {
		return b
	}
	out := make([]byte, len(b)/2)
	for i := range out {
		out[i] = b[2*i]
	}
	return out
}

// readTokenFile reads a nanoGPT .bin file: little-endian uint16 ids below vocab.
func readTokenFile(ctx context.Context, files localFiles, field, path string, vocab int) ([]byte, error) {
	b, err := files.read(ctx, field, path)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 || len(b)%2 != 0 {
		return nil, badData("%s: %s has %d bytes, not a non-empty run of uint16 tokens", field, path, len(b))
	}
	for i := 0; i < len(b); i += 2 {
		if v := int(binary.LittleEndian.Uint16(b[i:])); v >= vocab {
			return nil, badData("%s: %s holds token id %d, not below model.vocab %d", field, path, v, vocab)
		}
	}
	return b, nil
}

func (s *datasets) load(ctx context.Context, id string, train []int, holders []peer.ID) (*model.Dataset, error) {
	if !blob.ValidID(id) {
		return nil, fmt.Errorf("load dataset: %w %q (is the job's data.blob set?)", blob.ErrBadID, id)
	}
	key := fmt.Sprint(id, train) // one copy per blob and set of shards
	s.mu.Lock()
	l := s.loaded[key]
	if l == nil {
		l = &datasetLoad{done: make(chan struct{})}
		s.loaded[key] = l
		s.mu.Unlock()
		l.ds, l.err = s.fetchAndDecode(ctx, id, train, holders)
		if l.err != nil {
			s.mu.Lock()
			delete(s.loaded, key) // a later call tries again
			s.mu.Unlock()
		}
		close(l.done)
		return l.ds, l.err
	}
	s.mu.Unlock()
	select {
	case <-l.done:
		if l.err != nil {
			return s.load(ctx, id, train, holders) // the other caller failed: try ourselves
		}
		return l.ds, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *datasets) fetchAndDecode(ctx context.Context, id string, train []int, holders []peer.ID) (*model.Dataset, error) {
	if err := s.blobs.Fetch(ctx, id, s.sources(holders)); err != nil {
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	if m, err := s.readJobShards(id); err != nil || m != nil {
		if err != nil {
			return nil, fmt.Errorf("load dataset %s: %w", id, err)
		}
		ds, err := s.loadShards(ctx, m, train, holders)
		if err != nil {
			return nil, fmt.Errorf("load sharded dataset %s: %w", id, err)
		}
		return ds, nil
	}
	f, err := s.blobs.Open(id)
	if err != nil {
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	// The file stays open for the dataset's life: its tokens are read from it on demand
	// (an unlinked blob stays readable through the open descriptor).
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	ds, err := decodeDatasetAt(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load dataset %s: %w", id, err)
	}
	return ds, nil
}

// sources is holders, then every other live peer, without this node.
func (s *datasets) sources(holders []peer.ID) []peer.ID {
	self := s.n.ID()
	var out []peer.ID
	add := func(p peer.ID) {
		if p != self && p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range holders {
		add(p)
	}
	for _, pi := range s.n.mesh.Peers() {
		if pi.State == mesh.StateAlive {
			add(pi.ID)
		}
	}
	return out
}

// badDataError is a user's data problem: its message names the field, and it matches
// model.ErrBadData.
type badDataError struct{ msg string }

func (e *badDataError) Error() string        { return e.msg }
func (e *badDataError) Is(target error) bool { return target == model.ErrBadData }

func badData(format string, args ...any) error { return &badDataError{fmt.Sprintf(format, args...)} }

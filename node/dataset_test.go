package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/model"
)

// tokensOf reads every token of t.
func tokensOf(t model.Tokens) []int32 {
	out := make([]int32, t.Len())
	if err := t.Window(out, 0); err != nil {
		panic(err) // tokens of a dataset just loaded are all readable
	}
	return out
}

func sameDataset(t *testing.T, got, want *model.Dataset) {
	t.Helper()
	if got.Vocab != want.Vocab {
		t.Fatalf("vocab %d, want %d", got.Vocab, want.Vocab)
	}
	for _, s := range []struct {
		name      string
		got, want model.Tokens
	}{{"train", got.Train, want.Train}, {"val", got.Val, want.Val}} {
		g, w := tokensOf(s.got), tokensOf(s.want)
		if len(g) != len(w) {
			t.Fatalf("%s: %d tokens, want %d", s.name, len(g), len(w))
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("%s: token %d is %d, want %d", s.name, i, g[i], w[i])
			}
		}
	}
}

func writeTokens(t *testing.T, path string, toks ...uint16) {
	t.Helper()
	b := make([]byte, 0, 2*len(toks))
	for _, v := range toks {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDatasetCodecRoundTrip(t *testing.T) {
	for _, p := range []*packedDataset{
		{source: "bytes", vocab: 256, train: []byte("hello, world"), val: []byte("bye")},
		{source: "u16", vocab: 1000, u16: true, train: []byte{1, 0, 231, 3, 2, 0}, val: []byte{9, 0}},
		{source: "", vocab: 3, train: []byte{0, 1, 2}, val: nil},
	} {
		b, _ := io.ReadAll(p.reader())
		ds, err := decodeDataset(b)
		if err != nil {
			t.Fatalf("%s: %v", p.source, err)
		}
		if ds.Source != p.source || ds.Vocab != p.vocab {
			t.Fatalf("%s: decoded source %q vocab %d", p.source, ds.Source, ds.Vocab)
		}
		train, terr := packTokens(ds.Train, p.u16)
		val, verr := packTokens(ds.Val, p.u16)
		if err := errors.Join(terr, verr); err != nil {
			t.Fatalf("%s: %v", p.source, err)
		}
		again := &packedDataset{source: ds.Source, vocab: ds.Vocab, u16: p.u16, train: train, val: val}
		if b2, _ := io.ReadAll(again.reader()); !bytes.Equal(b, b2) {
			t.Fatalf("%s: decode and re-encode changed the blob", p.source)
		}
	}
	bad := &packedDataset{source: "x", vocab: 4, u16: true, train: []byte{4, 0}}
	b, _ := io.ReadAll(bad.reader())
	if _, err := decodeDataset(b); !errors.Is(err, model.ErrBadData) {
		t.Errorf("token past the vocabulary: got %v, want ErrBadData", err)
	}
	good, _ := io.ReadAll((&packedDataset{vocab: 256, train: []byte("abc")}).reader())
	for name, mutate := range map[string]func([]byte) []byte{
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
		"kind":      func(b []byte) []byte { b[5] = 3; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-1] },
		"trailing":  func(b []byte) []byte { return append(b, 0) },
		"huge":      func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<62); return b },
	} {
		if _, err := decodeDataset(mutate(bytes.Clone(good))); !errors.Is(err, model.ErrBadData) {
			t.Errorf("%s: got %v, want ErrBadData", name, err)
		}
	}
}

func FuzzDecodeDataset(f *testing.F) {
	for _, p := range []*packedDataset{
		{source: "s", vocab: 256, train: []byte("train"), val: []byte("v")},
		{source: "p", vocab: 300, u16: true, train: []byte{1, 1, 2, 0}, val: []byte{3, 0}},
		{source: "t", vocab: 300, u16: true, train: []byte{1, 1, 2, 0}, val: []byte{3, 0}, tokenizer: []byte(`{"model":{}}`)},
	} {
		b, _ := io.ReadAll(p.reader())
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := decodeDataset(b)
		if err != nil {
			return
		}
		if ds.Train.Len()+ds.Val.Len() > len(b) {
			t.Fatalf("%d tokens from %d bytes", ds.Train.Len()+ds.Val.Len(), len(b))
		}
		for _, toks := range []model.Tokens{ds.Train, ds.Val} {
			w := make([]int32, toks.Len())
			if err := toks.Window(w, 0); err != nil { // every token is readable, and below the vocabulary
				t.Fatal(err)
			}
			for _, v := range w {
				if int(v) >= ds.Vocab {
					t.Fatalf("token %d, vocabulary %d", v, ds.Vocab)
				}
			}
		}
	})
}

// dataNodes starts two nodes without the control plane, a and b, connected.
func dataNodes(t *testing.T) (a, b *Node) {
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	a = startNode(t, cfg)
	cfg = testConfig(t, a.Status().Addrs...)
	cfg.Consensus.Disabled = true
	b = startNode(t, cfg)
	testutil.WaitFor(t, 10*time.Second, "a and b alive to each other", func() bool {
		return stateOf(a, b.ID().String()) == mesh.StateAlive && stateOf(b, a.ID().String()) == mesh.StateAlive
	})
	return a, b
}

func TestDatasetPublishedOnOneNodeLoadsOnAnother(t *testing.T) {
	a, b := dataNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	text := filepath.Join(dir, "corpus.txt")
	os.WriteFile(text, bytes.Repeat([]byte("package main\nfunc main() {}\n"), 50000), 0o600) // 1.4 MB: two chunks
	writeTokens(t, filepath.Join(dir, "tr.bin"), 1, 2, 3, 999, 4)
	writeTokens(t, filepath.Join(dir, "va.bin"), 5, 6)
	nano := filepath.Join(dir, "nano")
	os.Mkdir(nano, 0o700)
	writeTokens(t, filepath.Join(nano, "train.bin"), 7, 8, 9, 200)
	writeTokens(t, filepath.Join(nano, "val.bin"), 10, 11)
	loaded := func(source string, vocab int) func() *model.Dataset {
		return func() *model.Dataset {
			ds, err := model.LoadDataset(source, vocab)
			if err != nil {
				t.Fatal(err)
			}
			return ds
		}
	}
	cases := []struct {
		data  jobspec.Data
		vocab int
		want  func() *model.Dataset
	}{
		{jobspec.Data{Source: text}, 256, loaded(text, 256)},
		// A nanoGPT directory and its train.bin, packed one byte or two per token.
		{jobspec.Data{Source: nano}, 256, loaded(nano, 256)},
		{jobspec.Data{Source: filepath.Join(nano, "train.bin")}, 1000, loaded(nano, 1000)},
		{jobspec.Data{Train: filepath.Join(dir, "tr.bin"), Val: filepath.Join(dir, "va.bin")}, 1000, func() *model.Dataset {
			return &model.Dataset{Vocab: 1000, Train: model.Uint16Tokens([]uint16{1, 2, 3, 999, 4}), Val: model.Uint16Tokens([]uint16{5, 6})}
		}},
	}
	for _, tc := range cases {
		id, _, err := a.PublishDataset(ctx, tc.data, tc.vocab, dir)
		if err != nil {
			t.Fatal(err)
		}
		if again, _, err := a.PublishDataset(ctx, tc.data, tc.vocab, dir); err != nil || again != id {
			t.Fatalf("publishing the same data again gave %s, %v; want %s", again, err, id)
		}
		if b.Blobs().Has(id) {
			t.Fatal("b holds the blob before loading it")
		}
		ds, err := b.LoadDataset(ctx, id, []peer.ID{a.ID()})
		if err != nil {
			t.Fatal(err)
		}
		sameDataset(t, ds, tc.want())
		if !b.Blobs().Has(id) {
			t.Error("b did not keep the blob it fetched")
		}
		if again, err := b.LoadDataset(ctx, id, nil); err != nil || again != ds {
			t.Errorf("second load: %p, %v; want the cached %p", again, err, ds)
		}
	}
	// Without holders, LoadDataset asks the live peers.
	id, _, err := a.PublishDataset(ctx, jobspec.Data{Train: filepath.Join(dir, "va.bin"), Val: filepath.Join(dir, "va.bin")}, 10, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LoadDataset(ctx, id, nil); err != nil {
		t.Fatalf("load from live peers: %v", err)
	}
	if _, err := b.LoadDataset(ctx, blob.IDOf([]byte("nobody has this"), 0), nil); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("load of a blob nobody holds: got %v, want ErrBlobNotFound", err)
	}
}

func TestPublishDatasetErrors(t *testing.T) {
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	n := startNode(t, cfg)
	dir := t.TempDir()
	writeTokens(t, filepath.Join(dir, "tr.bin"), 1, 300)
	os.WriteFile(filepath.Join(dir, "odd.bin"), []byte{1, 2, 3}, 0o600)
	for _, tc := range []struct {
		data jobspec.Data
		want string
	}{
		{jobspec.Data{Source: filepath.Join(dir, "missing.txt")}, "data.source: " + filepath.Join(dir, "missing.txt") + " does not exist on the submitting node"},
		{jobspec.Data{Train: filepath.Join(dir, "tr.bin"), Val: filepath.Join(dir, "nope.bin")}, "data.val: " + filepath.Join(dir, "nope.bin") + " does not exist"},
		{jobspec.Data{Train: filepath.Join(dir, "tr.bin"), Val: filepath.Join(dir, "tr.bin")}, "data.train: " + filepath.Join(dir, "tr.bin") + " holds token id 300, not below model.vocab 256"},
		{jobspec.Data{Train: filepath.Join(dir, "odd.bin"), Val: filepath.Join(dir, "tr.bin")}, "data.train: " + filepath.Join(dir, "odd.bin") + " has 3 bytes"},
	} {
		_, _, err := n.PublishDataset(context.Background(), tc.data, 256, dir)
		if !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want ErrBadData saying %q", tc.data, err, tc.want)
		}
	}
}

func TestPublishBuiltinGoStdOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("packs the Go standard library (about 50 MB)")
	}
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	n := startNode(t, cfg)
	ctx := context.Background()
	id, _, err := n.PublishDataset(ctx, jobspec.Data{Source: jobspec.BuiltinGoStd}, 256, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if again, _, err := n.PublishDataset(ctx, jobspec.Data{Source: jobspec.BuiltinGoStd}, 256, ""); err != nil || again != id {
		t.Fatalf("second publish: %s, %v; want %s", again, err, id)
	}
	testutil.Within(t, "the second publish of builtin:gostd (a repack would take seconds)", time.Since(start), time.Second)
	ds, err := n.LoadDataset(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := model.LoadDataset(model.BuiltinGoStd, 256)
	if err != nil {
		t.Fatal(err)
	}
	sameDataset(t, ds, want)
}

// postJob posts a spec to the node's job API and returns the status and decoded body.
func postJob(t *testing.T, n *Node, spec string) (int, map[string]string) {
	t.Helper()
	id, err := testClient(t, n).Submit(context.Background(), []byte(spec), os.TempDir())
	if err != nil {
		return api.StatusCode(err), map[string]string{"error": err.Error()}
	}
	return http.StatusCreated, map[string]string{"id": id}
}

func TestSubmitPublishesDatasetOrRejectsMissingPath(t *testing.T) {
	n := startNode(t, testConfig(t))
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { return n.Consensus() != nil && n.Consensus().Leader() != "" })
	missing := filepath.Join(t.TempDir(), "no-such-corpus.txt")
	code, body := postJob(t, n, "data:\n  source: "+missing+"\n")
	if code != http.StatusBadRequest || !strings.Contains(body["error"], missing+" does not exist on the submitting node") {
		t.Fatalf("submit with a missing data path: %d %v", code, body)
	}
	if code, body := postJob(t, n, "data:\n  blob: "+strings.Repeat("0", 64)+"\n"); code != http.StatusBadRequest {
		t.Fatalf("submit setting data.blob: %d %v", code, body)
	}
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	os.WriteFile(corpus, bytes.Repeat([]byte("abcdefgh\n"), 200), 0o600)
	spec := "data:\n  source: " + corpus + "\nmodel: {layers: 1, d_model: 8, heads: 1, context: 8}\n" +
		"train: {steps: 1, batch: 1, micro_batches: 1, warmup: 0, eval_every: 0}\ncheckpoint: {every: 0}\n"
	code, body = postJob(t, n, spec)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d %v", code, body)
	}
	job, _, err := n.Consensus().Job(context.Background(), body["id"], false)
	if err != nil {
		t.Fatal(err)
	}
	if id := job.Spec.Data.Blob; !blob.ValidID(id) || !n.Blobs().Has(id) {
		t.Fatalf("the job records blob %q, held here: %v", id, n.Blobs().Has(id))
	}
}

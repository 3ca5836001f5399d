package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

// textCorpus writes a directory of text files, a .jsonl of the same documents and a
// tokenizer of vocabulary 320 learned from them, under dir.
func textCorpus(t *testing.T, dir string) (docs, jsonl, tokPath string, tok *tokenizer.Tokenizer) {
	t.Helper()
	docs = filepath.Join(dir, "docs")
	var lines, all [][]byte
	for i := range 30 {
		body := bytes.Repeat([]byte("func f"+strings.Repeat("x", i%7)+"() { return a + b }\n"), 20+i)
		p := filepath.Join(docs, string(rune('a'+i%4)), "doc"+string(rune('a'+i))+".txt")
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		all = append(all, body)
		lines = append(lines, []byte(`{"content":"`+strings.ReplaceAll(string(body), "\n", `\n`)+`"}`))
	}
	jsonl = filepath.Join(dir, "docs.jsonl")
	os.WriteFile(jsonl, bytes.Join(lines, []byte("\n")), 0o600)
	bpe, err := tokenizer.Train(context.Background(), tokenizer.TrainConfig{VocabSize: 320, Special: []string{"<|endoftext|>"}, Pattern: tokenizer.GPT2Pattern}, all)
	if err != nil {
		t.Fatal(err)
	}
	tokPath = filepath.Join(dir, "tokenizer.json")
	if err := bpe.WriteFile(tokPath); err != nil {
		t.Fatal(err)
	}
	if tok, err = tokenizer.Load(tokPath); err != nil {
		t.Fatal(err)
	}
	return docs, jsonl, tokPath, tok
}

// TestTokenizedDatasetTravelsWithItsTokenizer: the submitting node encodes a directory or a
// .jsonl with data.tokenizer exactly as meshnode train does, and the node that loads the
// blob gets the same tokens and the tokenizer.json.
func TestTokenizedDatasetTravelsWithItsTokenizer(t *testing.T) {
	a, b := dataNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	docs, jsonl, tokPath, tok := textCorpus(t, dir)
	tokJSON, _ := os.ReadFile(tokPath)
	eot, _ := tok.EndOfText()
	opt := model.TextOptions{Encoder: tok, EndOfText: int(eot), TextField: "content"}
	for _, src := range []string{docs, jsonl} {
		id, vocab, err := a.PublishDataset(ctx, jobspec.Data{Source: src, Tokenizer: tokPath, TextField: "content"}, 0, dir)
		if err != nil {
			t.Fatal(err)
		}
		if vocab != tok.VocabSize() {
			t.Fatalf("%s: vocab %d, want the tokenizer's %d", src, vocab, tok.VocabSize())
		}
		ds, err := b.LoadDataset(ctx, id, []peer.ID{a.ID()})
		if err != nil {
			t.Fatal(err)
		}
		want, err := model.LoadDatasetWith(src, 0, opt)
		if err != nil {
			t.Fatal(err)
		}
		sameDataset(t, ds, want)
		if !bytes.Equal(ds.Tokenizer, tokJSON) {
			t.Fatalf("%s: the blob's tokenizer is %d bytes, want the %d of %s", src, len(ds.Tokenizer), len(tokJSON), tokPath)
		}
	}
	// Without a tokenizer a directory of text is bytes, as meshnode train reads it.
	id, _, err := a.PublishDataset(ctx, jobspec.Data{Source: docs}, 256, dir)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := b.LoadDataset(ctx, id, []peer.ID{a.ID()})
	if err != nil {
		t.Fatal(err)
	}
	want, err := model.LoadDatasetWith(docs, 256, model.TextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameDataset(t, ds, want)
	if ds.Tokenizer != nil {
		t.Fatal("a byte-level blob carries a tokenizer")
	}
}

func TestPublishTextErrors(t *testing.T) {
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	n := startNode(t, cfg)
	dir := t.TempDir()
	docs, jsonl, tokPath, _ := textCorpus(t, dir)
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, []byte(`{"model": {"type": "WordPiece"}}`), 0o600)
	outside := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(outside, []byte("{}"), 0o600)
	sharded := filepath.Join(dir, "shards")
	os.MkdirAll(sharded, 0o700)
	os.WriteFile(filepath.Join(sharded, model.ShardManifestFile), []byte("{}"), 0o600)
	for _, tc := range []struct {
		data  jobspec.Data
		vocab int
		want  string
	}{
		{jobspec.Data{Source: sharded}, 256, "data.source: " + sharded + " is a sharded corpus"},
		{jobspec.Data{Source: jsonl, Tokenizer: tokPath}, 0, "data.source: " + jsonl + `:1: no "text" field`},
		{jobspec.Data{Source: docs, Tokenizer: tokPath}, 256, "model.vocab: 256 does not match data.tokenizer " + tokPath},
		{jobspec.Data{Source: docs, Tokenizer: broken}, 0, "data.tokenizer: " + broken},
		{jobspec.Data{Source: docs, Tokenizer: outside}, 0, "data.tokenizer: " + outside + " is outside the allowed data roots"},
		{jobspec.Data{Source: docs, Tokenizer: filepath.Join(dir, "none.json")}, 0, "data.tokenizer: " + filepath.Join(dir, "none.json") + " does not exist"},
	} {
		_, _, err := n.PublishDataset(context.Background(), tc.data, tc.vocab, dir)
		if !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: got %v, want one line of ErrBadData saying %q", tc.data, err, tc.want)
		}
	}
}

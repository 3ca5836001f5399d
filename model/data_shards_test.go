package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShardsHoldTheDocumentsInOrder: a corpus written in 7-token shards loads with every
// document's ids, split by document (k mod 20 = 19 to validation), and windows that span
// shard boundaries read the same ids as the unsharded stream.
func TestShardsHoldTheDocumentsInOrder(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{}
	for k := range 45 {
		files[fmt.Sprintf("d%02d.txt", k)] = fmt.Sprintf("document %d body", k)
	}
	writeFiles(t, src, files)
	enc := narrowEncoder{}
	opt := TextOptions{Encoder: enc, EndOfText: 65000}
	out := filepath.Join(t.TempDir(), "shards")
	m, err := WriteShards(out, src, opt, 7)
	if err != nil {
		t.Fatal(err)
	}
	var train, val []int32
	for k := range 45 {
		ids := enc.AppendEncode(nil, []byte(files[fmt.Sprintf("d%02d.txt", k)]))
		doc := make([]int32, 0, len(ids)+1)
		for _, v := range ids {
			doc = append(doc, int32(v))
		}
		doc = append(doc, 65000)
		if k%20 == 19 {
			val = append(val, doc...)
		} else {
			train = append(train, doc...)
		}
	}
	if len(m.Train) != (len(train)+6)/7 || len(m.Val) != (len(val)+6)/7 {
		t.Fatalf("%d+%d shards for %d+%d tokens in shards of 7", len(m.Train), len(m.Val), len(train), len(val))
	}
	ds, err := LoadDatasetWith(out, 0, TextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := allTokens(ds); !equalInt32(got, append(append([]int32(nil), train...), val...)) {
		t.Fatalf("tokens differ from the documents'")
	}
	for off := 0; off+10 <= len(train); off += 3 {
		w := make([]int32, 10)
		if err := ds.Train.Window(w, off); err != nil {
			t.Fatal(err)
		}
		if !equalInt32(w, train[off:off+10]) {
			t.Fatalf("window at %d: %v, want %v", off, w, train[off:off+10])
		}
	}
	// A shard truncated under training fails the window that reads it, naming it.
	p := filepath.Join(out, m.Train[1].Hash+".tok")
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := ds.Train.Window(make([]int32, 4), m.Train[0].Tokens); !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), p) {
		t.Fatalf("truncated shard: got %v, want ErrBadData naming %s", err, p)
	}
	// A shard changed on disk is refused, naming it.
	os.WriteFile(p, make([]byte, 14), 0o644)
	if _, err := LoadShards(out); !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), p) {
		t.Fatalf("corrupt shard: %v", err)
	}
}

// narrowEncoder maps each byte b to id b+256 (vocabulary 65001, uint16 ids).
type narrowEncoder struct{}

func (narrowEncoder) AppendEncode(dst []uint32, text []byte) []uint32 {
	for _, b := range text {
		dst = append(dst, uint32(b)+256)
	}
	return dst
}

func (narrowEncoder) VocabSize() int { return 65001 }

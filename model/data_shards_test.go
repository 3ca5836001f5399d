package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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

// TestReplicaShardsCoverEveryShardOnce: with at least as many shards as replicas, the
// replicas' shards are disjoint and cover them all; with fewer, each replica gets one.
func TestReplicaShardsCoverEveryShardOnce(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for R := 1; R <= 5; R++ {
			seen := map[int]int{}
			for r := range R {
				got := ReplicaShards(n, r, R)
				if len(got) == 0 {
					t.Fatalf("n=%d R=%d: replica %d has no shard", n, R, r)
				}
				for _, i := range got {
					seen[i]++
				}
			}
			for i := range n {
				if n >= R && seen[i] != 1 {
					t.Fatalf("n=%d R=%d: shard %d held by %d replicas", n, R, i, seen[i])
				}
			}
		}
	}
	if !equalInts(ReplicaShards(7, 1, 3), []int{1, 4}) || !equalInts(ReplicaShards(2, 2, 3), []int{0}) {
		t.Fatalf("assignment changed: %v %v", ReplicaShards(7, 1, 3), ReplicaShards(2, 2, 3))
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestShardTokensVerifyEachShard: shards given as readers read like the manifest's split;
// a shard whose bytes do not hash to its reference, or of the wrong size, is refused
// naming it.
func TestShardTokensVerifyEachShard(t *testing.T) {
	mk := func(ids ...uint16) ([]byte, ShardRef) {
		var b []byte
		for _, v := range ids {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
		sum := sha256.Sum256(b)
		return b, ShardRef{Hash: hex.EncodeToString(sum[:]), Tokens: len(ids)}
	}
	b1, r1 := mk(1, 2, 3)
	b2, r2 := mk(4, 5)
	toks, err := ShardTokens([]ShardReader{{Ref: r1, Name: "s1", R: bytes.NewReader(b1), Size: int64(len(b1))},
		{Ref: r2, Name: "s2", R: bytes.NewReader(b2), Size: int64(len(b2))}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]int32, 4)
	if err := toks.Window(w, 1); err != nil || !equalInt32(w, []int32{2, 3, 4, 5}) || toks.Len() != 5 {
		t.Fatalf("window %v, %v (len %d)", w, err, toks.Len())
	}
	bad := append([]byte(nil), b2...)
	bad[0] ^= 1
	if _, err := ShardTokens([]ShardReader{{Ref: r2, Name: "s2", R: bytes.NewReader(bad), Size: int64(len(bad))}}, 10); !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), "s2 hashes to") {
		t.Fatalf("changed shard: %v", err)
	}
	if _, err := ShardTokens([]ShardReader{{Ref: r2, Name: "s2", R: bytes.NewReader(b1), Size: int64(len(b1))}}, 10); err == nil || !strings.Contains(err.Error(), "s2: 6 bytes") {
		t.Fatalf("wrong size: %v", err)
	}
	if _, err := ShardTokens([]ShardReader{{Ref: r1, Name: "s1", R: bytes.NewReader(b1), Size: int64(len(b1))}}, 3); err == nil || !strings.Contains(err.Error(), "token id 3") {
		t.Fatalf("id past the vocabulary: %v", err)
	}
}

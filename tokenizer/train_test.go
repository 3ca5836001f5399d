package tokenizer

import (
	"bytes"
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
)

// naiveTrain is the spec of Train: recount every pair of every piece before each merge.
func naiveTrain(docs [][]byte, vocab int, minFreq int64) [][2]uint32 {
	counts := countPieces(docs, gpt2Split)
	var words [][]uint32
	var freq []int64
	for k, f := range counts {
		w := make([]uint32, len(k))
		for i := range len(k) {
			w[i] = uint32(k[i])
		}
		words, freq = append(words, w), append(freq, f)
	}
	tokens := map[string]uint32{}
	var raw [][]byte
	for b := range 256 {
		raw = append(raw, []byte{byte(b)})
		tokens[string(raw[b])] = uint32(b)
	}
	var merges [][2]uint32
	for len(raw) < vocab {
		pc := map[uint64]int64{}
		for wi, w := range words {
			for i := 0; i+1 < len(w); i++ {
				pc[pairKey(w[i], w[i+1])] += freq[wi]
			}
		}
		var best uint64
		var bestN int64
		for k, n := range pc {
			if n > bestN || (n == bestN && k < best) {
				best, bestN = k, n
			}
		}
		if bestN < minFreq {
			break
		}
		a, b := uint32(best>>32), uint32(best)
		tok := append(append([]byte{}, raw[a]...), raw[b]...)
		id, ok := tokens[string(tok)]
		if !ok {
			id = uint32(len(raw))
			tokens[string(tok)] = id
			raw = append(raw, tok)
		}
		merges = append(merges, [2]uint32{a, b})
		for wi, w := range words {
			out := []uint32{}
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == a && w[i+1] == b {
					out = append(out, id)
					i++
				} else {
					out = append(out, w[i])
				}
			}
			words[wi] = out
		}
	}
	return merges
}

func randomCorpus(seed uint64, n int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	alphabet := []string{"a", "b", "c", "ab", " ", "  ", "\n", "é", "日", "1", "'s", "!", "aaa"}
	var docs [][]byte
	for range 4 {
		var buf bytes.Buffer
		for range n {
			buf.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		docs = append(docs, buf.Bytes())
	}
	return docs
}

// The incremental trainer learns exactly the merges of a full recount per merge.
func TestTrainEqualsRecount(t *testing.T) {
	for seed := range uint64(4) {
		docs := randomCorpus(seed, 3000)
		cfg := TrainConfig{VocabSize: 256 + 120 + 1, Special: []string{"<|endoftext|>"}}
		got, err := Train(context.Background(), cfg, docs)
		if err != nil {
			t.Fatal(err)
		}
		want := naiveTrain(docs, 256+120, 2)
		if !reflect.DeepEqual(got.Merges, want) {
			n := min(len(got.Merges), len(want))
			for i := range n {
				if got.Merges[i] != want[i] {
					t.Fatalf("seed %d: merge %d is %v, recount gives %v", seed, i, got.Merges[i], want[i])
				}
			}
			t.Fatalf("seed %d: %d merges, recount %d", seed, len(got.Merges), len(want))
		}
	}
}

// What Train learns round-trips through tokenizer.json, and encoding then decoding the
// training text gives it back.
func TestTrainWriteLoadRoundTrip(t *testing.T) {
	docs := randomCorpus(7, 5000)
	for _, pattern := range []string{GPT2Pattern, Llama3Pattern} {
		bpe, err := Train(context.Background(), TrainConfig{VocabSize: 401, Special: []string{"<|endoftext|>", "<|pad|>", "<\"q\\\n\u2028>"}, Pattern: pattern}, docs)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := bpe.Tokenizer()
		if err != nil {
			t.Fatal(err)
		}
		if tok.VocabSize() != len(bpe.Tokens)+3 {
			t.Errorf("vocab %d, want %d", tok.VocabSize(), len(bpe.Tokens)+3)
		}
		if id, ok := tok.ID("<\"q\\\n\u2028>"); !ok || int(id) != len(bpe.Tokens)+2 { // escaped in the JSON
			t.Errorf("the special token with quotes is %d %v", id, ok)
		}
		if id, ok := tok.ID("<|pad|>"); !ok || int(id) != len(bpe.Tokens)+1 || !tok.IsSpecial(id) {
			t.Errorf("<|pad|> is %d %v", id, ok)
		}
		for _, d := range docs {
			ids := tok.Encode(d)
			if len(ids) >= len(d) {
				t.Errorf("%d ids for %d bytes: nothing merged", len(ids), len(d))
			}
			back, err := tok.Decode(ids)
			if err != nil || !bytes.Equal(back, d) {
				t.Fatalf("round trip: %v", err)
			}
		}
	}
}

func TestTrainConfigValidate(t *testing.T) {
	bad := []TrainConfig{
		{VocabSize: 256},
		{VocabSize: 258, Special: []string{"a", "b"}},
		{VocabSize: 1000, Special: []string{"a", "a"}},
		{VocabSize: 1000, Pattern: `\w+`},
		{VocabSize: MaxVocab + 1},
		{VocabSize: 1000, MinFrequency: -1},
	}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v is valid", c)
		}
	}
	if err := DefaultTrainConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// A corpus with fewer pairs than the vocabulary asks for ends training early, even when
// every pair counts (MinFrequency 1).
func TestTrainRunsOutOfPairs(t *testing.T) {
	bpe, err := Train(context.Background(), TrainConfig{VocabSize: 1000, MinFrequency: 1}, [][]byte{[]byte("abc abd")})
	if err != nil {
		t.Fatal(err)
	}
	if len(bpe.Tokens) >= 1000 || len(bpe.Merges) == 0 {
		t.Fatalf("%d tokens, %d merges", len(bpe.Tokens), len(bpe.Merges))
	}
}

func TestTrainCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Train(ctx, TrainConfig{VocabSize: 300}, randomCorpus(1, 100)); err == nil {
		t.Fatal("a cancelled training ran")
	}
}

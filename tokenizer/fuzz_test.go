package tokenizer

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzRoundTrip: byte-level BPE is lossless, so decode(encode(b)) == b for every byte
// string, valid UTF-8 or not, under both pre-tokenizers.
func FuzzRoundTrip(f *testing.F) {
	toks := []*Tokenizer{loadTestTokenizer(f, goldenCases[0]), loadTestTokenizer(f, goldenCases[1])}
	sample := readSample(f)
	for i := 0; i+512 <= len(sample); i += 20011 {
		f.Add(sample[i : i+512])
	}
	for _, s := range []string{"", "\xff", "a\u0085 \ufeff", "<|endoftext|><|endoftext", "  \n\n\t x", "IT'ſ 1234567"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, tok := range toks {
			ids := tok.Encode(b)
			back, err := tok.Decode(ids)
			if err != nil || !bytes.Equal(back, b) {
				t.Fatalf("%s: %q → %v → %q (%v)", tok.Name(), b, ids, back, err)
			}
		}
	})
}

// FuzzParse: Parse never panics and either refuses a file or gives a tokenizer that
// encodes; seeded with valid files and small edits of them.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{GPT2Pattern, Llama3Pattern} { // small files: the fuzzer mutates them faster
		bpe, err := Train(f.Context(), TrainConfig{VocabSize: 272, Special: []string{"<s>"}, Pattern: pattern}, randomCorpus(1, 500))
		if err != nil {
			f.Fatal(err)
		}
		var buf bytes.Buffer
		bpe.WriteJSON(&buf)
		f.Add(buf.Bytes())
	}
	m, _ := json.Marshal(minimalJSON(f))
	f.Add(m)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a a"]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":4194303},"merges":[]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data, "fuzz.json")
		if err != nil {
			return
		}
		ids := tok.Encode([]byte("hello, world 123 日本"))
		if _, err := tok.Decode(ids); err != nil {
			t.Fatalf("decode of its own ids: %v", err)
		}
	})
}

// One piece of a megabyte (no space in it) merges in O(n log n) and round-trips; the
// encoder's grown buffers are not kept in the pool.
func TestLongPiece(t *testing.T) {
	tok := loadTestTokenizer(t, goldenCases[0])
	text := bytes.Repeat([]byte("func"), 1<<18)
	ids := tok.Encode(text)
	back, err := tok.Decode(ids)
	if err != nil || !bytes.Equal(back, text) {
		t.Fatalf("round trip of %d bytes: %v", len(text), err)
	}
	if len(ids) >= len(text)/2 {
		t.Errorf("%d ids for %d bytes", len(ids), len(text))
	}
}

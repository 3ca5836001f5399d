package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// goldenCases are tokenizer.json files learned on builtin:gostd (vocab 2048); beside each,
// the ids the references give for the samples (docs/reference/tokenizer/reference.mjs
// golden; testdata/README.md).
var goldenCases = []string{"gpt2-style-2048", "llama3-style-2048"}

func loadTestTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func readGoldenIDs(t testing.TB, name string) []uint32 {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".ids.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ IDs []uint32 }
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.IDs
}

func readSample(t testing.TB) []byte { return readText(t, "unicode-sample.txt") }

func readText(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenIDsMatchReference: the ids of a Unicode-heavy sample (emoji with ZWJ and skin
// tones, CJK, combining marks, RTL, whitespace and digit runs, contractions, special
// tokens) equal tokenizers.js's (and Rust tokenizers', which agree on it), and decode gives
// the sample back.
//
// The edge sample is made of the characters where implementations part: U+0085 and U+FEFF
// (whitespace to Oniguruma and to JavaScript respectively), letters of Unicode 15.0 and
// 15.1; its golden ids are Hugging Face's Rust tokenizers' (tokenizers.js differs there,
// docs/tokenizer.md).
func TestGoldenIDsMatchReference(t *testing.T) {
	for _, c := range []struct{ golden, sample string }{
		{"", "unicode-sample.txt"},
		{".edge", "edge-sample.txt"},
	} {
		for _, name := range goldenCases {
			t.Run(name+c.golden, func(t *testing.T) { checkGolden(t, name, name+c.golden, readText(t, c.sample)) })
		}
	}
}

func checkGolden(t *testing.T, name, golden string, text []byte) {
	tok := loadTestTokenizer(t, name)
	want := readGoldenIDs(t, golden)
	got := tok.Encode(text)
	if len(got) != len(want) {
		t.Errorf("%d ids, reference %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			lo := max(0, i-3)
			t.Fatalf("id %d: got %v, reference %v", i, got[lo:min(len(got), i+5)], want[lo:min(len(want), i+5)])
		}
	}
	back, err := tok.Decode(got)
	if err != nil || !bytes.Equal(back, text) {
		t.Fatalf("decode: %v, equal %v", err, bytes.Equal(back, text))
	}
}

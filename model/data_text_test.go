package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pairEncoder is a toy tokenizer: each byte pair is one id (b0*256+b1), a lone last byte
// its own id, so that ids exceed 256 and the uint16 width is exercised.
type pairEncoder struct{}

func (pairEncoder) AppendEncode(dst []uint32, text []byte) []uint32 {
	for i := 0; i < len(text); i += 2 {
		if i+1 < len(text) {
			dst = append(dst, uint32(text[i])<<8|uint32(text[i+1]))
		} else {
			dst = append(dst, uint32(text[i]))
		}
	}
	return dst
}

func (pairEncoder) VocabSize() int { return 1<<16 + 1 }

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func allTokens(ds *Dataset) []int32 {
	out := make([]int32, ds.Train.Len()+ds.Val.Len())
	if err := errors.Join(ds.Train.Window(out[:ds.Train.Len()], 0), ds.Val.Window(out[ds.Train.Len():], 0)); err != nil {
		panic(err) // tokens of a dataset just loaded are all readable
	}
	return out
}

func TestTextDirectoryIsSortedRecursiveDocuments(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"b.txt": "BB", "a/z.txt": "AZ", "a.txt": "A!"})
	if err := os.Symlink(filepath.Join(dir, "b.txt"), filepath.Join(dir, "c.txt")); err != nil {
		t.Fatal(err)
	}
	ds, err := LoadDatasetWith(dir, 0, TextOptions{Encoder: pairEncoder{}, EndOfText: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by slash path: a.txt, a/z.txt, b.txt; the symlink is skipped.
	want := []int32{'A'<<8 | '!', 1 << 16, 'A'<<8 | 'Z', 1 << 16, 'B'<<8 | 'B', 1 << 16}
	if got := allTokens(ds); !equalInt32(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	if ds.Vocab != 1<<16+1 || ds.Train.u32 == nil {
		t.Fatalf("vocab %d, u32 %v: want 65537 in uint32 tokens", ds.Vocab, ds.Train.u32 != nil)
	}
	// Without an encoder the same directory is bytes, documents back to back.
	ds, err = LoadDatasetWith(dir, 256, TextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(int32Bytes(allTokens(ds))); got != "A!AZBB" {
		t.Fatalf("byte text %q, want A!AZBB", got)
	}
}

func TestJSONLTextField(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d.jsonl")
	writeFiles(t, dir, map[string]string{"d.jsonl": `{"text":"hi","n":1}` + "\n\n" + `{"body":"x","text":"yo"}` + "\n"})
	ds, err := LoadDatasetWith(p, 0, TextOptions{Encoder: pairEncoder{}, EndOfText: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := allTokens(ds), []int32{'h'<<8 | 'i', 'y'<<8 | 'o'}; !equalInt32(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	for _, c := range []struct{ body, field, want string }{
		{`{"text":"a"}` + "\n" + `{"txt":"b"}`, "", `d.jsonl:2: no "text" field`},
		{`{"body":"a"}`, "body2", `d.jsonl:1: no "body2" field`},
		{`{"text":3}`, "", `d.jsonl:1: field "text" is not a string`},
		{`[1]`, "", `d.jsonl:1: not a JSON object`},
	} {
		writeFiles(t, dir, map[string]string{"d.jsonl": c.body})
		_, err := LoadDatasetWith(p, 0, TextOptions{Encoder: pairEncoder{}, TextField: c.field})
		if !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.body, err, c.want)
		}
	}
}

func TestTokenizerRefusesTokenSources(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"train.bin": "\x01\x00", "val.bin": "\x01\x00"})
	for _, src := range []string{BuiltinGoStd, dir, filepath.Join(dir, "train.bin")} {
		if _, err := LoadDatasetWith(src, 300, TextOptions{Encoder: pairEncoder{}}); !errors.Is(err, ErrBadData) {
			t.Errorf("%s with a tokenizer: error %v, want ErrBadData", src, err)
		}
	}
	// Without one, the .bin pair loads as before.
	if _, err := LoadDatasetWith(dir, 300, TextOptions{}); err != nil {
		t.Fatal(err)
	}
}

func equalInt32(a, b []int32) bool {
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

func int32Bytes(t []int32) []byte {
	b := make([]byte, len(t))
	for i, v := range t {
		b[i] = byte(v)
	}
	return b
}

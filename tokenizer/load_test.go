package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// minimalJSON is a valid GPT-2-style tokenizer.json over the 256 bytes with a few merges,
// edited by the cases below.
func minimalJSON(t testing.TB) map[string]any {
	t.Helper()
	vocab := map[string]any{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	vocab["he"], vocab["ll"], vocab["hell"], vocab["Ġw"] = 256, 257, 258, 259
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "normalizer": nil,
		"added_tokens":   []any{map[string]any{"id": 260, "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "vocab": vocab,
			"merges": []any{"h e", []any{"l", "l"}, "he ll", "Ġ w"}},
	}
}

func parseMap(t testing.TB, m map[string]any) (*Tokenizer, error) {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(b, "tok.json")
}

func TestParseMinimal(t *testing.T) {
	tok, err := parseMap(t, minimalJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode([]byte("hello world<|endoftext|>"))
	want := []uint32{258, 'o', 259, 'o', 'r', 'l', 'd', 260}
	if !equalIDs(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
}

func equalIDs(a, b []uint32) bool {
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

// Every configuration this package does not implement, and every malformed one, is an
// error that names the file and the field.
func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name        string
		edit        func(m map[string]any)
		field       string
		unsupported bool
	}{
		{"wordpiece", func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, "model.type", true},
		{"unigram", func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" }, "model.type", true},
		{"normalizer", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFC"} }, "normalizer", true},
		{"truncation", func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 8} }, "truncation", true},
		{"dropout", func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 }, "model.dropout", true},
		{"other regex", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated"},
				map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}, "pre_tokenizer.pretokenizers[0].pattern.Regex", true},
		{"metaspace", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, "pre_tokenizer.type", true},
		{"no pre-tokenizer", func(m map[string]any) { m["pre_tokenizer"] = nil }, "pre_tokenizer", true},
		{"wordpiece decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }, "decoder", true},
		{"lstrip", func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true }, "added_tokens[0].lstrip", true},
		{"bad merge", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"h e x"} }, "model.merges[0]", false},
		{"merge not in vocab", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"e h"} }, "model.merges[0]", false},
		{"merge array of 3", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{[]any{"h", "e", "l"}} }, "model.merges[0]", false},
		{"negative id", func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["he"] = -1 }, "model.vocab", false},
		{"huge id", func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["he"] = 1 << 40 }, "model.vocab", false},
		{"missing byte", func(m map[string]any) {
			delete(m["model"].(map[string]any)["vocab"].(map[string]any), "Ā")
			m["added_tokens"] = []any{}
		}, "model.vocab", false},
		{"added id renumbered", func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["id"] = 300 }, "added_tokens[0].id", false},
		{"added id not vocab's", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 260, "content": "he"}}
		}, "added_tokens[0].id", false},
		{"added twice", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 260, "content": "x!"}, map[string]any{"id": 261, "content": "x!"}}
		}, "added_tokens[1].content", false},
		{"no model", func(m map[string]any) { delete(m, "model") }, "model", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := minimalJSON(t)
			c.edit(m)
			_, err := parseMap(t, m)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a ConfigError", err)
			}
			if ce.File != "tok.json" || ce.Field != c.field || !strings.HasPrefix(err.Error(), "tok.json: "+c.field+": ") {
				t.Errorf("error %q names field %q, want %q", err, ce.Field, c.field)
			}
			if errors.Is(err, ErrUnsupported) != c.unsupported {
				t.Errorf("error %q: unsupported %v, want %v", err, !c.unsupported, c.unsupported)
			}
		})
	}
}

func TestParseNotJSON(t *testing.T) {
	for _, in := range []string{"", "{", "[]", `{"model": 3}`, "null"} {
		if _, err := Parse([]byte(in), "x.json"); err == nil || !strings.HasPrefix(err.Error(), "x.json: ") {
			t.Errorf("%q: error %v", in, err)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(path, []byte(`{"model": {"type": "WordPiece", "vocab": {"a": 0}}}`), 0o644)
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path+": model.type") {
		t.Fatalf("error %v", err)
	}
}

// Added tokens are found leftmost-longest in the raw text, before pre-tokenization.
func TestAddedTokensLeftmostLongest(t *testing.T) {
	m := minimalJSON(t)
	m["added_tokens"] = []any{
		map[string]any{"id": 260, "content": "<|endoftext|>", "special": true},
		map[string]any{"id": 261, "content": "<|end", "special": true},
		map[string]any{"id": 262, "content": "d of", "special": false},
	}
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode([]byte("<|end<|endoftext|>end of"))
	want := []uint32{261, 260, 'e', 'n', 262}
	if !equalIDs(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
	if text, _ := tok.AppendDecode(nil, got, true); string(text) != "end of" {
		t.Errorf("decode skipping specials: %q", text)
	}
	if _, err := tok.Decode([]uint32{9999}); err == nil {
		t.Error("an unknown id decoded")
	}
}

// ignore_merges (Llama-3) takes a piece that is itself a token whole.
func TestIgnoreMerges(t *testing.T) {
	m := minimalJSON(t)
	model := m["model"].(map[string]any)
	model["vocab"].(map[string]any)["hel"] = 261
	model["vocab"].(map[string]any)["hello"] = 262
	model["vocab"].(map[string]any)["hellhello"] = 263
	m["added_tokens"] = []any{}
	for _, ignore := range []bool{false, true} {
		model["ignore_merges"] = ignore
		tok, err := parseMap(t, m)
		if err != nil {
			t.Fatal(err)
		}
		got := tok.Encode([]byte("hello"))
		want := []uint32{258, 'o'}
		if ignore {
			want = []uint32{262}
		}
		if !equalIDs(got, want) {
			t.Errorf("ignore_merges %v: %v, want %v", ignore, got, want)
		}
	}
}

// A byte whose rune is missing from the vocab takes the <0xXX> tokens of that rune's UTF-8
// when byte_fallback is set.
func TestByteFallback(t *testing.T) {
	m := minimalJSON(t)
	model := m["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	delete(vocab, "Ā")                        // byte 0x00; "Ā" is C4 80 in UTF-8
	vocab["<0xC4>"], vocab["<0x80>"] = 0, 260 // in place of Ā and <|endoftext|>
	m["added_tokens"] = []any{}
	model["byte_fallback"] = true
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode([]byte("h\x00")), []uint32{'h', 0, 260}; !equalIDs(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

func TestPrefixSpace(t *testing.T) {
	m := minimalJSON(t)
	m["pre_tokenizer"].(map[string]any)["add_prefix_space"] = true
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode([]byte("w<|endoftext|>w")), []uint32{259, 260, 259}; !equalIDs(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// Non-normalized added tokens are matched first and normalized ones only in the gaps they
// leave, so "<|end" (normalized: false) cuts "<|endoftext|>" (normalized: true) as Rust
// tokenizers does (checked with reference.mjs rust; tokenizers.js differs).
func TestAddedTokensNonNormalizedFirst(t *testing.T) {
	m := minimalJSON(t)
	m["added_tokens"] = []any{
		map[string]any{"id": 260, "content": "<|endoftext|>", "special": true, "normalized": true},
		map[string]any{"id": 261, "content": "<|end", "special": true, "normalized": false},
	}
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode([]byte("a<|endoftext|>"))
	want := []uint32{'a', 261, 'o', 'f', 't', 'e', 'x', 't', '|', '>'}
	if !equalIDs(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// Two fallback bytes in a row stay two (their pair of missing ids is no merge).
func TestByteFallbackTwice(t *testing.T) {
	m := minimalJSON(t)
	model := m["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	delete(vocab, "Ā")
	vocab["<0xC4>"], vocab["<0x80>"] = 0, 260
	m["added_tokens"] = []any{}
	model["byte_fallback"] = true
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode([]byte("\x00\x00")), []uint32{0, 260, 0, 260}; !equalIDs(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// A byte whose rune is missing takes unk_token without byte_fallback; fusing unknowns is
// refused rather than done differently.
func TestUnknownByte(t *testing.T) {
	m := minimalJSON(t)
	model := m["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	delete(vocab, "Ā")
	vocab["<unk>"] = 0
	model["unk_token"] = "<unk>"
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode([]byte("h\x00\x00")), []uint32{'h', 0, 0}; !equalIDs(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	model["fuse_unk"] = true
	if _, err := parseMap(t, m); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "model.fuse_unk") {
		t.Fatalf("fuse_unk: %v", err)
	}
}

// A TemplateProcessing post-processor (Llama-3's BOS) is applied by EncodeAddingSpecial
// and not by Encode; a template naming an unknown special token is refused by field.
func TestTemplateProcessing(t *testing.T) {
	m := minimalJSON(t)
	m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{"id": 261, "content": "<s>", "special": true})
	bos := map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}
	m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel"},
		map[string]any{"type": "TemplateProcessing",
			"single":         []any{bos, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []any{261}}}},
	}}
	tok, err := parseMap(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.EncodeAddingSpecial([]byte("hello")); !equalIDs(got, []uint32{261, 258, 'o'}) {
		t.Errorf("with the template: %v", got)
	}
	if got := tok.Encode([]byte("hello")); !equalIDs(got, []uint32{258, 'o'}) {
		t.Errorf("without: %v", got)
	}
	m["post_processor"].(map[string]any)["processors"].([]any)[1].(map[string]any)["special_tokens"] = map[string]any{}
	if _, err := parseMap(t, m); err == nil || !strings.Contains(err.Error(), "post_processor.processors[1].single[0]") {
		t.Errorf("unknown special token: %v", err)
	}
}

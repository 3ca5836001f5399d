package tokenizer

import (
	"reflect"
	"testing"
)

func pieces(split splitter, s string) []string {
	loadClasses()
	var out []string
	b := []byte(s)
	for i := 0; i < len(b); {
		j := split(b, i)
		out = append(out, string(b[i:j]))
		i = j
	}
	return out
}

// The pieces Oniguruma gives for each pattern (what Hugging Face's Rust tokenizers splits).
func TestGPT2Split(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's we're I'VE", []string{"it", "'s", " we", "'re", " I", "'", "VE"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   \n", []string{"a", "   \n"}},
		{"x\ny", []string{"x", "\n", "y"}},
		{"12345 678", []string{"12345", " 678"}},
		{"½Ⅻ", []string{"½Ⅻ"}}, // \p{N}: No and Nl
		{"café 日本語", []string{"café", " 日本語"}},
		{"e\u0301", []string{"e", "\u0301"}}, // a combining mark is neither L nor N
		{" !!x", []string{" !!", "x"}},
		{"a\u00a0b", []string{"a", "\u00a0", "b"}},
		{"a\u0085\u0085b", []string{"a", "\u0085", "\u0085", "b"}}, // U+0085 is \s in Oniguruma
		{"a\ufeffb", []string{"a", "\ufeff", "b"}},                 // U+FEFF is not
		{"\xff\xfeab", []string{"\xff\xfe", "ab"}},
		{"''s", []string{"''", "s"}},
	}
	for _, c := range cases {
		if got := pieces(gpt2Split, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLlama3Split(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"IT'S we'RE it'ſ", []string{"IT", "'S", " we", "'RE", " it", "'ſ"}},
		{"1234567", []string{"123", "456", "7"}},
		{".hello (x)", []string{".hello", " (", "x", ")"}},
		{"a;\n\nb", []string{"a", ";\n\n", "b"}},
		{"a \n \n  b", []string{"a", " \n \n", " ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"\r\nb", []string{"\r\n", "b"}},
		{"日本 語", []string{"日本", " 語"}},
		{"'hello", []string{"'hello"}},
	}
	split := llama3Split(3)
	for _, c := range cases {
		if got := pieces(split, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// The two pre-tokenizer patterns this package implements. Their text is compared exactly
// with a Split pre-tokenizer's pattern; the ByteLevel pre-tokenizer with use_regex uses
// GPT2Pattern.
const (
	// GPT2Pattern is GPT-2's pre-tokenizer regex (the ByteLevel pre-tokenizer's).
	GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Llama3Pattern is Llama-3's (tiktoken's cl100k_base) pre-tokenizer regex.
	Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Llama3Pattern with single digits (Qwen2's).
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// A splitter returns the end of the pattern's match that starts at i (i < len(s)). Both
// patterns match at every position, so pre-tokenization is a chain of such matches.
type splitter func(s []byte, i int) int

// Character classes as Oniguruma sees them: \p{L}, \p{N}, \s (Unicode White_Space, which
// includes U+0085 and not U+FEFF), and the rest. Bytes that are not UTF-8 are "other".
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass [128]uint8

func init() {
	for c := range 128 {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			asciiClass[c] = clsLetter
		case c >= '0' && c <= '9':
			asciiClass[c] = clsNumber
		case c == ' ', c >= '\t' && c <= '\r':
			asciiClass[c] = clsSpace
		}
	}
}

// bmpClass caches runeClass for planes 0-2 (BMP, emoji and CJK extensions); loadClasses fills it before
// the first pre-tokenization (Parse and Train call it), so that programs importing the
// package but not tokenizing pay nothing.
var (
	bmpClass    [0x30000]uint8
	loadClasses = sync.OnceFunc(func() {
		for r := range rune(len(bmpClass)) {
			bmpClass[r] = runeClass(r)
		}
	})
)

// classAt classifies the rune at s[i] and returns its class, value and width.
func classAt(s []byte, i int) (uint8, rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, n := utf8.DecodeRune(s[i:])
	switch {
	case r == utf8.RuneError && n == 1:
		return clsOther, r, 1
	case r < rune(len(bmpClass)):
		return bmpClass[r], r, n
	}
	return runeClass(r), r, n
}

// runeClass is the class of r from the unicode tables.
func runeClass(r rune) uint8 {
	switch {
	case r < utf8.RuneSelf:
		return asciiClass[r]
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r): // White_Space: \t-\r, space, U+0085, U+00A0, Zs, U+2028, U+2029
		return clsSpace
	}
	return clsOther
}

// runOf returns the end of the run of class cls starting at i.
func runOf(s []byte, i int, cls uint8) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf { // ASCII without a call: most of code and English
			if asciiClass[b] != cls {
				break
			}
			i++
			continue
		}
		c, _, n := classAt(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

// lastRuneStart is the start of the rune that ends at j.
func lastRuneStart(s []byte, j int) int {
	_, n := utf8.DecodeLastRune(s[:j])
	return j - n
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at s[i] and returns the
// end of the match, or i when none does. fold makes it case-insensitive as Oniguruma's
// (?i:) is (simple case folding: 'ſ' U+017F matches s).
func contraction(s []byte, i int, fold bool) int {
	at := func(k int) rune {
		if k >= len(s) {
			return -1
		}
		r, _ := utf8.DecodeRune(s[k:])
		if fold {
			switch {
			case r >= 'A' && r <= 'Z':
				r += 'a' - 'A'
			case r == 'ſ':
				r = 's'
			}
		}
		return r
	}
	width := func(k int) int { _, n := utf8.DecodeRune(s[k:]); return n }
	j := i + 1
	switch r := at(j); r {
	case 's', 't', 'm', 'd':
		return j + width(j)
	case 'r', 'v', 'l':
		want := 'e'
		if r == 'l' {
			want = 'l'
		}
		k := j + width(j)
		if at(k) == want {
			return k + width(k)
		}
	}
	return i
}

// spaceRun matches \s+(?!\S)|\s+ at a whitespace rune at i: the whole run when it ends the
// text, else the run less its last rune (which then leads the next piece), else the single
// rune.
func spaceRun(s []byte, i int) int {
	j := runOf(s, i, clsSpace)
	if j == len(s) {
		return j
	}
	if k := lastRuneStart(s, j); k > i {
		return k
	}
	return j
}

// gpt2Split implements GPT2Pattern.
func gpt2Split(s []byte, i int) int {
	c, r, n := classAt(s, i)
	if r == '\'' {
		if j := contraction(s, i, false); j > i {
			return j
		}
	}
	if r == ' ' && i+n < len(s) {
		if c2, _, _ := classAt(s, i+n); c2 != clsSpace {
			return runOf(s, i+n, c2) // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
		}
	}
	if c != clsSpace {
		return runOf(s, i, c)
	}
	return spaceRun(s, i)
}

// llama3Split implements Llama3Pattern (maxDigits 3) and qwen2Pattern (maxDigits 1).
func llama3Split(maxDigits int) splitter {
	return func(s []byte, i int) int {
		c, r, n := classAt(s, i)
		if r == '\'' {
			if j := contraction(s, i, true); j > i {
				return j
			}
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if c == clsLetter {
			return runOf(s, i, clsLetter)
		}
		if c != clsNumber && r != '\r' && r != '\n' && i+n < len(s) {
			if c2, _, _ := classAt(s, i+n); c2 == clsLetter {
				return runOf(s, i+n, clsLetter)
			}
		}
		// \p{N}{1,maxDigits}
		if c == clsNumber {
			j := i
			for d := 0; d < maxDigits && j < len(s); d++ {
				c2, _, m := classAt(s, j)
				if c2 != clsNumber {
					break
				}
				j += m
			}
			return j
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		start := -1
		if c == clsOther {
			start = i
		} else if r == ' ' && i+n < len(s) {
			if c2, _, _ := classAt(s, i+n); c2 == clsOther {
				start = i + n
			}
		}
		if start >= 0 {
			j := runOf(s, start, clsOther)
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
		// \s*[\r\n]+ : up to the last \r or \n of the whitespace run
		j := runOf(s, i, clsSpace)
		for k := j - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
		return spaceRun(s, i)
	}
}

package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Bounds on what Parse accepts, so that a malformed or hostile file cannot make it allocate
// without limit.
const (
	// MaxFileSize is the largest tokenizer.json Load reads (Llama-3's is 9 MB).
	MaxFileSize = 256 << 20
	// MaxVocab is the largest vocabulary (model vocab plus added tokens).
	MaxVocab = 1 << 22
	// MaxMerges is the longest merges list.
	MaxMerges = 1 << 22
)

// ErrUnsupported is wrapped by a ConfigError for a valid configuration this package does
// not implement (another model type, a normalizer, another regex).
var ErrUnsupported = errors.New("not supported")

// ConfigError is a problem with a tokenizer.json: the file, the field (a JSON path such as
// pre_tokenizer.pretokenizers[0].pattern) and what is wrong.
type ConfigError struct {
	File  string
	Field string
	Err   error
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.File, e.Field, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Load reads and parses a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, &ConfigError{File: path, Err: fmt.Errorf("larger than %d MiB", MaxFileSize>>20)}
	}
	return Parse(data, path)
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json; name is used in errors.
func Parse(data []byte, name string) (*Tokenizer, error) {
	loadClasses()
	p := &parser{name: name}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, p.errf("", "not a tokenizer.json: %v", err)
	}
	t := &Tokenizer{name: name}
	steps := []func() error{
		func() error { return p.checkNull("truncation", f.Truncation) },
		func() error { return p.checkNull("padding", f.Padding) },
		func() error { return p.checkNull("normalizer", f.Normalizer) },
		func() error { return p.model(t, f.Model) },
		func() error { return p.addedTokens(t, f.AddedTokens) },
		func() error { return p.preTokenizer(t, f.PreTokenizer) },
		func() error { return p.postProcessor(t, "post_processor", f.PostProcessor) },
		func() error { return p.decoder("decoder", f.Decoder) },
		func() error { return p.byteSymbols(t, f.Model) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	t.buildDecodeTable()
	t.pool.New = func() any { return newEncoder(t) }
	return t, nil
}

type parser struct{ name string }

func (p *parser) errf(field, format string, args ...any) error {
	return &ConfigError{File: p.name, Field: field, Err: fmt.Errorf(format, args...)}
}

func (p *parser) unsupported(field, format string, args ...any) error {
	return &ConfigError{File: p.name, Field: field, Err: fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))}
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func (p *parser) checkNull(field string, raw json.RawMessage) error {
	if !isNull(raw) {
		return p.unsupported(field, "must be null (this tokenizer applies no %s)", field)
	}
	return nil
}

// model reads the BPE model: vocab, merges and options.
func (p *parser) model(t *Tokenizer, m *modelJSON) error {
	switch {
	case m == nil:
		return p.errf("model", "missing")
	case m.Type != "BPE" && !(m.Type == "" && m.Merges != nil):
		return p.unsupported("model.type", "%q (only byte-level BPE is implemented)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return p.unsupported("model.dropout", "%g (BPE dropout is random; set it to null)", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return p.unsupported("model.continuing_subword_prefix", "%q", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return p.unsupported("model.end_of_word_suffix", "%q", *m.EndOfWordSuffix)
	case len(m.Vocab) == 0:
		return p.errf("model.vocab", "empty")
	case len(m.Vocab) > MaxVocab:
		return p.errf("model.vocab", "%d entries (at most %d)", len(m.Vocab), MaxVocab)
	case len(m.Merges) > MaxMerges:
		return p.errf("model.merges", "%d entries (at most %d)", len(m.Merges), MaxMerges)
	}
	t.ignoreMerges = m.IgnoreMerges
	t.byteFallback = m.ByteFallback
	if m.UnkToken != nil {
		t.unk = *m.UnkToken
	}
	if err := p.vocab(t, m.Vocab); err != nil {
		return err
	}
	return p.merges(t, m)
}

func (p *parser) vocab(t *Tokenizer, vocab map[string]int64) error {
	limit := int64(len(vocab)) + 1<<16 // ids may have holes, not arbitrarily many
	t.vocab = make(map[string]uint32, len(vocab))
	for tok, id := range vocab {
		if id < 0 || id >= limit {
			return p.errf("model.vocab", "token %q has id %d (ids run from 0 to about the vocabulary's size, %d)", tok, id, len(vocab))
		}
		t.vocab[tok] = uint32(id)
		t.grow(int(id))
		if t.strs[id] != "" || t.present[id] {
			return p.errf("model.vocab", "id %d is given to both %q and %q", id, t.strs[id], tok)
		}
		t.strs[id], t.present[id] = tok, true
	}
	return nil
}

func (p *parser) merges(t *Tokenizer, m *modelJSON) error {
	t.merges = newPairTable(len(m.Merges))
	for rank, raw := range m.Merges {
		field := fmt.Sprintf("model.merges[%d]", rank)
		a, b, err := parseMerge(raw)
		if err != nil {
			return p.errf(field, "%v", err)
		}
		ia, oka := t.vocab[a]
		ib, okb := t.vocab[b]
		ic, okc := t.vocab[a+b]
		switch {
		case !oka:
			return p.errf(field, "%q is not in model.vocab", a)
		case !okb:
			return p.errf(field, "%q is not in model.vocab", b)
		case !okc:
			return p.errf(field, "the merged token %q is not in model.vocab", a+b)
		}
		t.merges.add(pairKey(ia, ib), merge{rank: uint32(rank), id: ic}) // the first (lowest) rank wins, as in tokenizers
	}
	return nil
}

// parseMerge reads a merge in either form: "a b" or ["a", "b"].
func parseMerge(raw json.RawMessage) (string, string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", "", err
		}
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") || a == "" || b == "" {
			return "", "", fmt.Errorf("%q is not two tokens separated by one space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 || pair[0] == "" || pair[1] == "" {
		return "", "", fmt.Errorf("%s is neither \"a b\" nor [\"a\", \"b\"]", truncate(raw, 60))
	}
	return pair[0], pair[1], nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// addedTokens reads added_tokens: matched in the raw text before pre-tokenization.
func (p *parser) addedTokens(t *Tokenizer, toks []addedTokenJSON) error {
	if len(toks) > 1<<20 {
		return p.errf("added_tokens", "%d entries (at most %d)", len(toks), 1<<20)
	}
	seen := make(map[string]bool, len(toks))
	maxAdded := int64(-1)
	for i, a := range toks {
		field := fmt.Sprintf("added_tokens[%d]", i)
		switch {
		case a.Content == "":
			return p.errf(field+".content", "empty")
		case seen[a.Content]:
			return p.errf(field+".content", "%q is listed twice", a.Content)
		case a.SingleWord:
			return p.unsupported(field+".single_word", "true")
		case a.Lstrip:
			return p.unsupported(field+".lstrip", "true")
		case a.Rstrip:
			return p.unsupported(field+".rstrip", "true")
		}
		seen[a.Content] = true
		want := addedID(t, a.Content, maxAdded)
		if a.ID != want {
			return p.errf(field+".id", "%d, but tokenizers gives %q the id %d (a token of model.vocab keeps its id; "+
				"the others take the next ids after the vocabulary, in list order)", a.ID, a.Content, want)
		}
		maxAdded = max(maxAdded, want)
		id := int(want)
		t.grow(id)
		if t.present[id] && t.strs[id] != a.Content {
			return p.errf(field+".id", "%d is %q in model.vocab, not %q", id, t.strs[id], a.Content)
		}
		t.strs[id], t.present[id] = a.Content, true
		t.special[id] = a.Special
		set := &t.added[0]
		if a.Normalized {
			set = &t.added[1] // matched in the gaps the others leave, as tokenizers does
		}
		set.add([]byte(a.Content), uint32(id))
	}
	return nil
}

// addedID is the id Hugging Face's tokenizers gives an added token when it loads the file
// (AddedVocabulary::add_tokens): its model.vocab id if it has one, else the vocabulary's
// size, or one past the largest added id once that reaches the size. The ids written in
// the file are only checked against it, so that a file tokenizers would renumber is refused
// rather than encoded with other ids.
func addedID(t *Tokenizer, content string, maxAdded int64) int64 {
	if id, ok := t.vocab[content]; ok {
		return int64(id)
	}
	size := int64(len(t.vocab))
	if maxAdded >= 0 && (maxAdded >= size || size == 0) {
		return maxAdded + 1
	}
	return size
}

// byteSymbols finds each byte's starting symbol: its byte-level rune in the vocab, else
// byte fallback (<0xXX> tokens of the rune's UTF-8), else the unknown token.
func (p *parser) byteSymbols(t *Tokenizer, m *modelJSON) error {
	for b := range 256 {
		ch := string(byteToRune[b])
		if id, ok := t.vocab[ch]; ok {
			t.byteID[b] = id
			continue
		}
		t.byteID[b] = noID
		var ids []uint32
		if t.byteFallback {
			for _, c := range []byte(ch) {
				if id, ok := t.vocab[fmt.Sprintf("<0x%02X>", c)]; ok {
					ids = append(ids, id)
				} else {
					ids = nil
					break
				}
			}
		}
		if ids == nil && t.unk != "" {
			id, ok := t.vocab[t.unk]
			switch {
			case !ok:
				return p.errf("model.unk_token", "%q is not in model.vocab", t.unk)
			case m.FuseUnk:
				return p.unsupported("model.fuse_unk", "true with bytes that need the unknown token (0x%02X)", b)
			}
			ids = []uint32{id}
		}
		if ids == nil {
			return p.errf("model.vocab", "lacks byte 0x%02X (%q), and neither byte_fallback nor unk_token covers it", b, ch)
		}
		t.fallback[b] = ids
	}
	return nil
}

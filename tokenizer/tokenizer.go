package tokenizer

import (
	"fmt"
	"sync"
)

// noID marks a byte whose byte-level rune is not in the vocabulary (it takes the byte
// fallback or unknown ids and merges with nothing).
const noID = ^uint32(0)

// merge is the result of merging a pair: its rank (lower merges first) and the new id.
type merge struct{ rank, id uint32 }

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// Tokenizer is a loaded byte-level BPE. It is immutable and safe for concurrent use; each
// call borrows a scratch encoder (buffers and a word cache) from a pool.
type Tokenizer struct {
	name string

	vocab   map[string]uint32 // model vocab: token as written in the file → id
	strs    []string          // id → token as written (model vocab or added token)
	present []bool            // id is assigned
	special []bool            // id is an added token marked special

	merges       pairTable     // pair of ids → merge
	byteID       [256]uint32   // each byte's starting symbol, or noID
	fallback     [256][]uint32 // ids for a byte whose symbol is noID
	wordID       map[string]uint32
	ignoreMerges bool
	byteFallback bool
	unk          string

	template    []templatePiece // the post-processor's single template; nil: none
	stages      []splitter      // pre-tokenizer regexes, applied in order
	prefixSpace bool            // ByteLevel add_prefix_space
	added       [2]addedSet

	decBytes []byte   // id → decoded bytes, decBytes[decOff[id]:decOff[id+1]]
	decOff   []uint32 //

	pool sync.Pool
}

// grow makes the id tables cover id.
func (t *Tokenizer) grow(id int) {
	for len(t.strs) <= id {
		t.strs = append(t.strs, "")
		t.present = append(t.present, false)
		t.special = append(t.special, false)
	}
}

// buildDecodeTable fixes every id's decoded bytes (the ByteLevel decoder) and the raw-byte
// index of the model vocab that ignore_merges uses.
func (t *Tokenizer) buildDecodeTable() {
	t.decOff = make([]uint32, len(t.strs)+1)
	for id, s := range t.strs {
		raw, _ := byteLevelDecode(s)
		t.decBytes = append(t.decBytes, raw...)
		t.decOff[id+1] = uint32(len(t.decBytes))
	}
	if t.ignoreMerges {
		t.wordID = make(map[string]uint32, len(t.vocab))
		for s, id := range t.vocab {
			if raw, ok := byteLevelDecode(s); ok {
				t.wordID[string(raw)] = id
			}
		}
	}
}

// Name is the file the tokenizer was loaded from (or the name given to Parse).
func (t *Tokenizer) Name() string { return t.name }

// VocabSize is one more than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.strs) }

// Token is id's token as tokenizer.json writes it ("" and false for an unassigned id).
func (t *Tokenizer) Token(id uint32) (string, bool) {
	if int(id) >= len(t.strs) || !t.present[id] {
		return "", false
	}
	return t.strs[id], true
}

// ID is the id of a token as tokenizer.json writes it: an added token's content or a model
// vocab entry.
func (t *Tokenizer) ID(token string) (uint32, bool) {
	for _, set := range t.added {
		if id, ok := set.ids[token]; ok {
			return id, true
		}
	}
	id, ok := t.vocab[token]
	return id, ok
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id uint32) bool { return int(id) < len(t.special) && t.special[id] }

// Encode returns text's ids: added tokens matched first, then the pre-tokenizer, then BPE
// on each piece. It is Hugging Face tokenizers' encode(text, add_special_tokens=False): the
// post-processor's template (a BOS token, say) is not added.
func (t *Tokenizer) Encode(text []byte) []uint32 {
	return t.AppendEncode(make([]uint32, 0, len(text)/3+1), text)
}

// EncodeAddingSpecial is Encode with the post-processor's template applied around the
// ids (Llama-3's <|begin_of_text|> before them, say): tokenizers' encode(text,
// add_special_tokens=True). Without a TemplateProcessing it is Encode.
func (t *Tokenizer) EncodeAddingSpecial(text []byte) []uint32 {
	if t.template == nil {
		return t.Encode(text)
	}
	var out []uint32
	for _, piece := range t.template {
		if piece.sequence {
			out = t.AppendEncode(out, text)
		} else {
			out = append(out, piece.ids...)
		}
	}
	return out
}

// templatePiece is a run of special ids of a template, or the place of the text's ids.
type templatePiece struct {
	ids      []uint32
	sequence bool
}

// AppendEncode appends text's ids to dst.
func (t *Tokenizer) AppendEncode(dst []uint32, text []byte) []uint32 {
	e := t.pool.Get().(*encoder)
	e.out = dst
	e.encode(text)
	dst, e.out = e.out, nil
	e.shrink()
	t.pool.Put(e)
	return dst
}

// Decode returns the bytes the ids stand for (the ByteLevel decoder). Unlike tokenizers,
// which replaces bytes that are not UTF-8 by U+FFFD, it returns them as they are, so that
// Decode(Encode(b)) == b for every byte string b.
func (t *Tokenizer) Decode(ids []uint32) ([]byte, error) {
	return t.AppendDecode(nil, ids, false)
}

// AppendDecode appends the bytes of ids to dst; skipSpecial leaves out special tokens.
func (t *Tokenizer) AppendDecode(dst []byte, ids []uint32, skipSpecial bool) ([]byte, error) {
	for i, id := range ids {
		if int(id) >= len(t.strs) || !t.present[id] {
			return dst, fmt.Errorf("%s: id %d (position %d) is not in the vocabulary (size %d)", t.name, id, i, len(t.strs))
		}
		if skipSpecial && t.special[id] {
			continue
		}
		dst = append(dst, t.decBytes[t.decOff[id]:t.decOff[id+1]]...)
	}
	return dst, nil
}

// endOfTextNames are the special tokens that end a document, in the order looked for:
// GPT-2's (and Train's default), Llama-3's, Llama-2's and SentencePiece's.
var endOfTextNames = []string{"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}

// EndOfText is the id of the special token that separates documents, if the tokenizer has
// one of the usual names (<|endoftext|>, <|end_of_text|>, </s>, <eos>) as a special token.
func (t *Tokenizer) EndOfText() (uint32, bool) {
	for _, name := range endOfTextNames {
		if id, ok := t.ID(name); ok && t.IsSpecial(id) {
			return id, true
		}
	}
	return 0, false
}

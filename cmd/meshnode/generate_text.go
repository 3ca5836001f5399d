package main

import (
	"fmt"

	"github.com/meshnode/meshnode/model"

	"github.com/meshnode/meshnode/tokenizer"
)

// textCodec turns generate's prompt into tokens and tokens back into text: through a
// tokenizer, or byte for byte.
type textCodec struct {
	tok *tokenizer.Tokenizer // nil: bytes
}

// textCodec picks --tokenizer, else the checkpoint's tokenizer.json, else bytes; the
// tokenizer's vocabulary must fit the model's (a byte-level one needs 256).
func (o *generateOptions) textCodec(vocab int) (textCodec, error) {
	path := o.tokenizer
	if path == "" {
		path = findTokenizer(o.checkpoint)
	}
	if path == "" {
		if vocab > 256 && model.IsHFDir(o.checkpoint) {
			o.sample.Vocab = 256 // a Hugging Face model without a tokenizer reads and writes bytes
			return textCodec{}, nil
		}
		if vocab != 256 {
			return textCodec{}, usagef("--checkpoint %s: vocabulary of %d and no tokenizer.json beside it: give --tokenizer", o.checkpoint, vocab)
		}
		return textCodec{}, nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return textCodec{}, usagef("--tokenizer: %v", err)
	}
	if tok.VocabSize() > vocab {
		return textCodec{}, usagef("--tokenizer: %s has a vocabulary of %d, larger than the model's %d", path, tok.VocabSize(), vocab)
	}
	return textCodec{tok: tok}, nil
}

func (c textCodec) encode(text []byte) ([]int32, error) {
	if c.tok == nil {
		out := make([]int32, len(text))
		for i, b := range text {
			out[i] = int32(b)
		}
		return out, nil
	}
	ids := c.tok.Encode(text)
	if len(ids) == 0 {
		return nil, fmt.Errorf("encodes to no tokens")
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

// decode returns the text of toks; a token the tokenizer lacks (a model padded past its
// vocabulary) is an error.
func (c textCodec) decode(toks []int32) ([]byte, error) {
	if c.tok == nil {
		out := make([]byte, len(toks))
		for i, t := range toks {
			out[i] = byte(t)
		}
		return out, nil
	}
	ids := make([]uint32, len(toks))
	for i, t := range toks {
		ids[i] = uint32(t)
	}
	return c.tok.Decode(ids)
}

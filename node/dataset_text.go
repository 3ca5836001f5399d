package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

// isTextSource reports whether data.source must be read as text documents rather than by
// the byte/.bin rules of packSource: a tokenizer is set, the source is a .jsonl file, or
// it is a directory without a train.bin.
func isTextSource(d jobspec.Data, real string, isDir bool) bool {
	if d.Tokenizer != "" || (!isDir && strings.HasSuffix(real, ".jsonl")) {
		return true
	}
	if !isDir {
		return false
	}
	return !fileExists(filepath.Join(real, "train.bin"))
}

// packText reads data.source as documents (a file, every regular file of a directory in
// sorted order, or each line of a .jsonl), encodes them with data.tokenizer when set (its
// end-of-text token after each document) and splits the tokens 95/5 as model.LoadDatasetWith
// does. vocab 0 takes the tokenizer's; another must equal it. Every path goes through files'
// root and size checks; a directory's files together are held to the same size limit.
func (s *datasets) packText(ctx context.Context, d jobspec.Data, vocab int, files localFiles) (*packedDataset, error) {
	var tok *tokenizer.Tokenizer
	var tokJSON []byte
	if d.Tokenizer != "" {
		var err error
		if tokJSON, err = files.read(ctx, "data.tokenizer", d.Tokenizer); err != nil {
			return nil, err
		}
		if tok, err = tokenizer.Parse(tokJSON, d.Tokenizer); err != nil {
			return nil, badData("data.tokenizer: %v", err)
		}
		n := tok.VocabSize()
		switch {
		case n > jobspec.MaxVocab:
			return nil, badData("data.tokenizer: %s has a vocabulary of %d, more than model.vocab's limit of %d", d.Tokenizer, n, jobspec.MaxVocab)
		case vocab != 0 && vocab != n:
			return nil, badData("model.vocab: %d does not match data.tokenizer %s, whose vocabulary is %d (leave model.vocab out to use it)", vocab, d.Tokenizer, n)
		}
		vocab = n
	}
	var ids []uint32
	var raw []byte
	eot := -1
	if tok != nil {
		if id, ok := tok.EndOfText(); ok {
			eot = int(id)
		}
	}
	doc := func(b []byte) error {
		if tok == nil {
			raw = append(raw, b...)
			return nil
		}
		ids = tok.AppendEncode(ids, b)
		if eot >= 0 {
			ids = append(ids, uint32(eot))
		}
		return nil
	}
	if err := readDocuments(ctx, d, files, true, doc); err != nil {
		return nil, err
	}
	p := &packedDataset{source: d.Source, vocab: 256, tokenizer: tokJSON}
	if tok == nil {
		if len(raw) == 0 {
			return nil, badData("data.source: %s holds no text", d.Source)
		}
		cut := len(raw) - len(raw)*5/100
		p.train, p.val = raw[:cut], raw[cut:]
		return p, nil
	}
	if len(ids) == 0 {
		return nil, badData("data.source: %s holds no text", d.Source)
	}
	p.vocab, p.u16 = vocab, vocab > 256
	cut := len(ids) - len(ids)*5/100
	p.train, p.val = packIDs(ids[:cut], p.u16), packIDs(ids[cut:], p.u16)
	return p, nil
}

// readDocuments calls doc with each document of data.source. Each file is held to the
// node's --max-data-bytes; capTotal holds a directory's files together to it too (a corpus
// packed into one blob), which sharding at submit does not need.
func readDocuments(ctx context.Context, d jobspec.Data, files localFiles, capTotal bool, doc func([]byte) error) error {
	const field = "data.source"
	real, st, err := files.resolve(field, d.Source)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		b, err := files.read(ctx, field, d.Source)
		if err != nil {
			return err
		}
		if strings.HasSuffix(real, ".jsonl") {
			if err := model.ReadJSONL(d.Source, bytes.NewReader(b), d.TextField, doc); err != nil {
				return badData("%s: %s", field, strings.TrimPrefix(err.Error(), model.ErrBadData.Error()+": "))
			}
			return nil
		}
		return doc(b)
	}
	paths, err := model.TextFiles(real)
	if err != nil {
		return badData("%s: %s holds no regular files to read", field, d.Source)
	}
	var total int64
	for _, p := range paths {
		b, err := files.read(ctx, field, p)
		if err != nil {
			return err
		}
		if total += int64(len(b)); capTotal && total > files.maxBytes {
			return badData("%s: the files of %s add up to more than the node's limit of %d bytes (--max-data-bytes)", field, d.Source, files.maxBytes)
		}
		if err := doc(b); err != nil {
			return err
		}
	}
	return nil
}

// packIDs writes ids as raw token bytes: one byte each, or little-endian uint16.
func packIDs(ids []uint32, u16 bool) []byte {
	if !u16 {
		out := make([]byte, len(ids))
		for i, v := range ids {
			out[i] = byte(v)
		}
		return out
	}
	out := make([]byte, 2*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

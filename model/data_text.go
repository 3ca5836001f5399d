package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// TextEncoder turns text into token ids; *tokenizer.Tokenizer is one.
type TextEncoder interface {
	// AppendEncode appends text's ids to dst.
	AppendEncode(dst []uint32, text []byte) []uint32
	// VocabSize is one more than the largest id the encoder yields.
	VocabSize() int
}

// TextOptions says how text sources become tokens.
type TextOptions struct {
	// Encoder tokenizes text; nil reads text as bytes (vocabulary 256), as before.
	Encoder TextEncoder
	// EndOfText is the id put after each document of a directory or .jsonl file; < 0 (or
	// no Encoder) puts nothing between documents.
	EndOfText int
	// TextField is the field of each .jsonl line that holds its text; empty means "text".
	TextField string
}

// DefaultTextField is the .jsonl field read when TextOptions.TextField is empty.
const DefaultTextField = "text"

// LoadDatasetWith is LoadDataset with text sources read through opt, and sharded corpora
// (a directory with a ShardManifestFile, LoadShards; a tokenizer given must have its
// vocabulary): a text file, a
// directory of text files (one without train.bin: every regular file under it,
// recursively, sorted by slash path, each a document), or a .jsonl file (each non-blank
// line a JSON object whose opt.TextField string is a document). The tokens of a text
// source are split by position: the last 5% is validation. builtin:gostd and nanoGPT .bin
// pairs are loaded exactly as LoadDataset does; with an Encoder they are refused, since
// they are not text to tokenize (gostd) or already tokens (.bin).
func LoadDatasetWith(source string, vocab int, opt TextOptions) (*Dataset, error) {
	if IsShardedCorpus(source) {
		ds, err := LoadShards(source)
		if err == nil && opt.Encoder != nil && opt.Encoder.VocabSize() != ds.Vocab {
			err = fmt.Errorf("%w: %s holds ids of a vocabulary of %d, the tokenizer has %d: give the tokenizer that wrote it", ErrBadData, source, ds.Vocab, opt.Encoder.VocabSize())
		}
		return ds, err
	}
	if opt.Encoder == nil && !isTextCollection(source) {
		return LoadDataset(source, vocab)
	}
	if source == BuiltinGoStd || strings.HasPrefix(source, "builtin:") {
		return nil, fmt.Errorf("%w: %s is byte-level; a tokenizer applies to text files, directories and .jsonl", ErrBadData, source)
	}
	st, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	if opt.Encoder != nil && (isBinSource(source, st) || filepath.Ext(source) == ".bin") {
		return nil, fmt.Errorf("%w: %s holds tokens already; a tokenizer applies to text files, directories and .jsonl", ErrBadData, source)
	}
	docs, err := textDocuments(source, st, opt)
	if err != nil {
		return nil, err
	}
	return tokenizeDocuments(source, docs, opt)
}

// isTextCollection reports whether source is a directory of text files or a .jsonl file:
// sources LoadDataset did not read before tokenizers, which LoadDatasetWith reads.
func isTextCollection(source string) bool {
	st, err := os.Stat(source)
	if err != nil {
		return false
	}
	return (st.IsDir() && !isBinSource(source, st) && !IsShardedCorpus(source)) || (!st.IsDir() && strings.HasSuffix(source, ".jsonl"))
}

// isBinSource reports whether source is a nanoGPT pair: train.bin, or a directory with one.
func isBinSource(source string, st os.FileInfo) bool {
	if !st.IsDir() {
		return filepath.Base(source) == "train.bin"
	}
	_, err := os.Stat(filepath.Join(source, "train.bin"))
	return err == nil
}

// textDocuments calls back with each document of source in order.
func textDocuments(source string, st os.FileInfo, opt TextOptions) (func(yield func([]byte) error) error, error) {
	switch {
	case st.IsDir():
		files, err := TextFiles(source)
		if err != nil {
			return nil, err
		}
		return func(yield func([]byte) error) error {
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("%w: %v", ErrBadData, err)
				}
				if err := yield(b); err != nil {
					return err
				}
			}
			return nil
		}, nil
	case strings.HasSuffix(source, ".jsonl"):
		return func(yield func([]byte) error) error { return JSONLDocuments(source, opt.TextField, yield) }, nil
	}
	return func(yield func([]byte) error) error {
		b, err := os.ReadFile(source)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadData, err)
		}
		return yield(b)
	}, nil
}

// TextFiles lists the regular files under dir, recursively, sorted by their slash path
// relative to dir (bytewise). Symlinks, devices and other non-regular files are skipped.
func TextFiles(dir string) ([]string, error) {
	var rels []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rels = append(rels, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrBadData, dir, err)
	}
	if len(rels) == 0 {
		return nil, fmt.Errorf("%w: %s holds no regular files", ErrBadData, dir)
	}
	sort.Strings(rels)
	out := make([]string, len(rels))
	for i, r := range rels {
		out[i] = filepath.Join(dir, filepath.FromSlash(r))
	}
	return out, nil
}

// maxJSONLLine bounds one line of a .jsonl file.
const maxJSONLLine = 256 << 20

// JSONLDocuments calls yield with the text field of each non-blank line of path. A line
// that is not a JSON object, lacks the field or holds a non-string there is an error
// naming path:line and the field.
func JSONLDocuments(path, field string, yield func([]byte) error) error {
	if field == "" {
		field = DefaultTextField
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadData, err)
	}
	defer f.Close()
	return ReadJSONL(path, f, field, yield)
}

// ReadJSONL is JSONLDocuments on r; name is the file's name in errors.
func ReadJSONL(name string, r io.Reader, field string, yield func([]byte) error) error {
	if field == "" {
		field = DefaultTextField
	}
	path := name
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxJSONLLine)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%w: %s:%d: not a JSON object: %v", ErrBadData, path, line, err)
		}
		raw, ok := obj[field]
		if !ok {
			return fmt.Errorf("%w: %s:%d: no %q field (set data.text_field / --text-field to the field holding the text)", ErrBadData, path, line, field)
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return fmt.Errorf("%w: %s:%d: field %q is not a string", ErrBadData, path, line, field)
		}
		if err := yield([]byte(text)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadData, path, err)
	}
	return nil
}

// tokenizeDocuments encodes each document (bytes without an Encoder), with EndOfText after
// each when set, and splits the stream 95/5 by position.
func tokenizeDocuments(source string, docs func(func([]byte) error) error, opt TextOptions) (*Dataset, error) {
	if opt.Encoder == nil {
		var all []byte
		if err := docs(func(b []byte) error { all = append(all, b...); return nil }); err != nil {
			return nil, err
		}
		if len(all) == 0 {
			return nil, fmt.Errorf("%w: %s is empty", ErrBadData, source)
		}
		cut := len(all) - len(all)*5/100
		return &Dataset{Source: source, Train: ByteTokens(all[:cut]), Val: ByteTokens(all[cut:]), Vocab: 256}, nil
	}
	var ids []uint32
	err := docs(func(b []byte) error {
		ids = opt.Encoder.AppendEncode(ids, b)
		if opt.EndOfText >= 0 {
			ids = append(ids, uint32(opt.EndOfText))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrBadData, source)
	}
	cut := len(ids) - len(ids)*5/100
	ds := &Dataset{Source: source, Vocab: opt.Encoder.VocabSize()}
	ds.Train, ds.Val = NarrowTokens(ids[:cut], ds.Vocab), NarrowTokens(ids[cut:], ds.Vocab)
	return ds, nil
}

// NarrowTokens stores ids in the narrowest width that holds the vocabulary: bytes up to
// 256, uint16 up to 65536, else uint32 (ids itself, not copied).
func NarrowTokens(ids []uint32, vocab int) Tokens {
	switch {
	case vocab <= 256:
		b := make([]byte, len(ids))
		for i, v := range ids {
			b[i] = byte(v)
		}
		return ByteTokens(b)
	case vocab <= 1<<16:
		u := make([]uint16, len(ids))
		for i, v := range ids {
			u[i] = uint16(v)
		}
		return Uint16Tokens(u)
	}
	return Uint32Tokens(ids)
}

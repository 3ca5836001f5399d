package model

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// BuiltinGoStd names the default corpus: the Go standard library's source (docs/gpt.md).
const BuiltinGoStd = "builtin:gostd"

// Tokens is a read-only sequence of token ids: bytes for byte-level text, uint16 for
// nanoGPT token files.
type Tokens struct {
	bytes  []byte
	u16    []uint16
	u32    []uint32
	file   *tokenFile
	shards *shardSet
}

// ByteTokens wraps b (not copied) as byte tokens.
func ByteTokens(b []byte) Tokens { return Tokens{bytes: b} }

// Uint16Tokens wraps t (not copied).
func Uint16Tokens(t []uint16) Tokens { return Tokens{u16: t} }

// Uint32Tokens wraps t (not copied): ids of vocabularies larger than 65536.
func Uint32Tokens(t []uint32) Tokens { return Tokens{u32: t} }

// Len is the number of tokens.
func (t Tokens) Len() int {
	if t.shards != nil {
		return t.shards.len()
	}
	if t.file != nil {
		return t.file.n
	}
	if t.u32 != nil {
		return len(t.u32)
	}
	if t.u16 != nil {
		return len(t.u16)
	}
	return len(t.bytes)
}

// Window copies tokens [off, off+len(dst)) into dst. Tokens held in memory never fail;
// tokens read on demand from a file fail when the file no longer holds them (truncated or
// replaced under a running job), with an error wrapping ErrBadData that names the file.
func (t Tokens) Window(dst []int32, off int) error {
	if t.shards != nil {
		return t.shards.window(dst, off)
	}
	if t.file != nil {
		return t.file.window(dst, off)
	}
	switch {
	case t.u32 != nil:
		for i, v := range t.u32[off : off+len(dst)] {
			dst[i] = int32(v)
		}
	case t.u16 != nil:
		for i, v := range t.u16[off : off+len(dst)] {
			dst[i] = int32(v)
		}
	default:
		for i, v := range t.bytes[off : off+len(dst)] {
			dst[i] = int32(v)
		}
	}
	return nil
}

// Dataset is a training corpus split into its training and validation tokens.
type Dataset struct {
	// Source is what was loaded: builtin:gostd or a path.
	Source string
	// Train and Val are the two splits.
	Train, Val Tokens
	// Vocab is the number of distinct token ids the data may hold: 256 for bytes.
	Vocab int
	// Tokenizer is the tokenizer.json that encoded the text, as read; nil for bytes and
	// already-tokenized files. Generating from a model trained on it needs the same file.
	Tokenizer []byte
}

// ErrBadData is wrapped by every error about unusable training data.
var ErrBadData = errors.New("unusable data")

// LoadDataset opens a corpus: "builtin:gostd"; a directory holding nanoGPT's train.bin and
// val.bin (little-endian uint16 ids, vocab from the caller); a path to such a train.bin
// (val.bin beside it); or any other file, read as bytes and split by position (the last 5%
// is validation). Errors name the file and say what is wrong.
func LoadDataset(source string, vocab int) (*Dataset, error) {
	switch {
	case source == BuiltinGoStd:
		root, err := GoRoot()
		if err != nil {
			return nil, err
		}
		train, val, err := GoStdCorpus(root)
		if err != nil {
			return nil, err
		}
		return &Dataset{Source: source, Train: ByteTokens(train), Val: ByteTokens(val), Vocab: 256}, nil
	case strings.HasPrefix(source, "builtin:"):
		return nil, fmt.Errorf("%w: unknown built-in corpus %q (known: %s)", ErrBadData, source, BuiltinGoStd)
	}
	st, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	if st.IsDir() {
		return loadBinPair(source, filepath.Join(source, "train.bin"), filepath.Join(source, "val.bin"), vocab)
	}
	if filepath.Base(source) == "train.bin" {
		return loadBinPair(source, source, filepath.Join(filepath.Dir(source), "val.bin"), vocab)
	}
	b, err := os.ReadFile(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrBadData, source)
	}
	cut := len(b) - len(b)*5/100
	return &Dataset{Source: source, Train: ByteTokens(b[:cut]), Val: ByteTokens(b[cut:]), Vocab: 256}, nil
}

func loadBinPair(source, trainPath, valPath string, vocab int) (*Dataset, error) {
	train, err := openUint16File(trainPath, vocab)
	if err != nil {
		return nil, err
	}
	val, err := openUint16File(valPath, vocab)
	if err != nil {
		return nil, err
	}
	return &Dataset{Source: source, Train: train, Val: val, Vocab: vocab}, nil
}

// CheckContext reports whether both splits are long enough for windows of T tokens plus
// their next-token targets.
func (ds *Dataset) CheckContext(T int) error {
	if n := ds.Train.Len(); n < T+2 {
		return fmt.Errorf("%w: %s: training split has %d tokens, fewer than context+2 = %d", ErrBadData, ds.Source, n, T+2)
	}
	if n := ds.Val.Len(); n < T+1 {
		return fmt.Errorf("%w: %s: validation split has %d tokens, fewer than context+1 = %d", ErrBadData, ds.Source, n, T+1)
	}
	return nil
}

// GoRoot finds the local Go installation: $GOROOT, else `go env GOROOT`, else the root
// this binary was built with.
func GoRoot() (string, error) {
	candidates := []string{os.Getenv("GOROOT")}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	//lint:ignore SA1019 the build-time root is only a last resort after $GOROOT and `go env GOROOT`
	candidates = append(candidates, runtime.GOROOT())
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(c, "src")); err == nil && st.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: %s needs a Go installation: set GOROOT or put go on the PATH", ErrBadData, BuiltinGoStd)
}

// GoStdCorpus packs builtin:gostd from the Go tree at goroot: every regular, non-symlink
// file under src whose name ends in .go but not _test.go, skipping paths with a testdata or
// vendor segment, sorted by slash path relative to src (bytewise); file k goes to
// validation when k % 20 == 19, else to training; each file is followed by one '\n'.
func GoStdCorpus(goroot string) (train, val []byte, err error) {
	src := filepath.Join(goroot, "src")
	var files []string
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != src && (n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !d.Type().IsRegular() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read %s: %v", ErrBadData, src, err)
	}
	sort.Strings(files) // Go strings compare bytewise.
	var tb, vb bytes.Buffer
	for k, rel := range files {
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(rel)))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrBadData, err)
		}
		dst := &tb
		if k%20 == 19 {
			dst = &vb
		}
		dst.Write(b)
		dst.WriteByte('\n')
	}
	if tb.Len() == 0 {
		return nil, nil, fmt.Errorf("%w: no Go source files under %s", ErrBadData, src)
	}
	return tb.Bytes(), vb.Bytes(), nil
}

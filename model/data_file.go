package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// tokenFile is a run of tokens in a file (one byte or a little-endian uint16 each), read
// on demand: a window costs one pread of its bytes, so memory does not grow with the file.
type tokenFile struct {
	r     io.ReaderAt
	off   int64 // byte offset of token 0
	n     int   // tokens
	width int   // bytes per token: 1 or 2
}

// FileTokens wraps n little-endian uint16 tokens at byte offset off of r, read on demand
// (not copied). Window returns an error naming the file (r's Name, when it has one) if r
// no longer holds them: the file was truncated or replaced under a running job.
func FileTokens(r io.ReaderAt, off int64, n int) Tokens {
	return Tokens{file: &tokenFile{r: r, off: off, n: n, width: 2}}
}

// FileByteTokens is FileTokens for one-byte tokens.
func FileByteTokens(r io.ReaderAt, off int64, n int) Tokens {
	return Tokens{file: &tokenFile{r: r, off: off, n: n, width: 1}}
}

// name is the file's name for an error: r's Name (an *os.File's path) or a description.
func (f *tokenFile) name() string {
	if n, ok := f.r.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "the token file"
}

func (f *tokenFile) window(dst []int32, off int) error {
	buf := make([]byte, f.width*len(dst))
	at := f.off + int64(f.width)*int64(off)
	if n, err := f.r.ReadAt(buf, at); n != len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("the file ends before byte %d: truncated or replaced while training", at+int64(len(buf)))
		}
		return fmt.Errorf("%w: %s: read tokens [%d, %d): %v", ErrBadData, f.name(), off, off+len(dst), err)
	}
	if f.width == 1 {
		for i, b := range buf {
			dst[i] = int32(b)
		}
		return nil
	}
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint16(buf[2*i:]))
	}
	return nil
}

// scanChunk is how many bytes openUint16File reads at a time to check the ids.
const scanChunk = 4 << 20

// openUint16File opens a nanoGPT .bin file as streamed tokens, after one pass that checks
// its ids against vocab in chunks (memory stays at one chunk, whatever the file's size).
func openUint16File(path string, vocab int) (Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return Tokens{}, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return Tokens{}, fmt.Errorf("%w: %v", ErrBadData, err)
	}
	size := st.Size()
	switch {
	case !st.Mode().IsRegular():
		f.Close()
		return Tokens{}, fmt.Errorf("%w: %s is not a regular file", ErrBadData, path)
	case size == 0:
		f.Close()
		return Tokens{}, fmt.Errorf("%w: %s is empty", ErrBadData, path)
	case size%2 != 0:
		f.Close()
		return Tokens{}, fmt.Errorf("%w: %s has %d bytes, not a whole number of uint16 tokens", ErrBadData, path, size)
	}
	buf := make([]byte, scanChunk)
	for off := int64(0); off < size; off += scanChunk {
		b := buf[:min(scanChunk, size-off)]
		if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return Tokens{}, fmt.Errorf("%w: read %s: %v", ErrBadData, path, err)
		}
		for i := 0; i < len(b); i += 2 {
			if v := int(binary.LittleEndian.Uint16(b[i:])); v >= vocab {
				f.Close()
				return Tokens{}, fmt.Errorf("%w: %s holds token id %d, not below the vocabulary size %d", ErrBadData, path, v, vocab)
			}
		}
	}
	return FileTokens(f, 0, int(size/2)), nil
}

package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

// A dataset blob holds both splits of a corpus, so that every node of a job trains on the
// same bytes. Little-endian:
//
//	off  size  field
//	0    4     magic "MNDS"
//	4    1     version (1)
//	5    1     token kind: 1 bytes, 2 uint16
//	6    2     reserved, zero
//	8    4     vocab
//	12   4     length of the source name (≤ maxDatasetSource)
//	16   8     training tokens
//	24   8     validation tokens
//	32   …     source name, training tokens, validation tokens
//
// Version 2, written only for a corpus encoded with a tokenizer (so that every other blob,
// and its ID, stays as it was), inserts after the validation-token count
//
//	32   8     length of the tokenizer.json (≤ tokenizer.MaxFileSize)
//
// and puts the tokenizer.json's bytes after the source name.
const (
	datasetHeaderLen    = 32
	datasetVersion      = 1
	datasetVersion2     = 2
	maxDatasetTokenizer = tokenizer.MaxFileSize
	datasetKindBytes    = 1
	datasetKindUint16   = 2
	maxDatasetSource    = 4096
)

var datasetMagic = [4]byte{'M', 'N', 'D', 'S'}

// packedDataset is a corpus ready to publish: its splits as raw token bytes (one byte
// per token, or little-endian uint16).
type packedDataset struct {
	source     string
	vocab      int
	u16        bool
	train, val []byte
	// tokenizer is the tokenizer.json that encoded the text; nil for bytes and .bin tokens.
	tokenizer []byte
}

func (p *packedDataset) width() int {
	if p.u16 {
		return 2
	}
	return 1
}

// reader yields the blob's encoding without copying the splits.
func (p *packedDataset) reader() io.Reader {
	src := p.source
	if len(src) > maxDatasetSource {
		src = src[:maxDatasetSource]
	}
	hlen := datasetHeaderLen
	if p.tokenizer != nil {
		hlen += 8
	}
	h := make([]byte, hlen, hlen+len(src)+len(p.tokenizer))
	copy(h, datasetMagic[:])
	h[4], h[5] = datasetVersion, datasetKindBytes
	if p.tokenizer != nil {
		h[4] = datasetVersion2
		binary.LittleEndian.PutUint64(h[32:], uint64(len(p.tokenizer)))
	}
	if p.u16 {
		h[5] = datasetKindUint16
	}
	binary.LittleEndian.PutUint32(h[8:], uint32(p.vocab))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(src)))
	binary.LittleEndian.PutUint64(h[16:], uint64(len(p.train)/p.width()))
	binary.LittleEndian.PutUint64(h[24:], uint64(len(p.val)/p.width()))
	h = append(h, src...)
	h = append(h, p.tokenizer...)
	return io.MultiReader(bytes.NewReader(h), bytes.NewReader(p.train), bytes.NewReader(p.val))
}

// decodeDataset decodes a dataset blob held in memory (tests and fuzzing).
func decodeDataset(b []byte) (*model.Dataset, error) {
	return decodeDatasetAt(bytes.NewReader(b), int64(len(b)))
}

// decodeDatasetAt decodes a dataset blob of size bytes read from r. Only the header, the
// source name and the tokenizer are read into memory; the tokens are checked against the
// vocabulary in one streamed pass and then read from r on demand (model.FileTokens), so
// memory does not grow with the corpus. Every length is checked against size.
func decodeDatasetAt(r io.ReaderAt, size int64) (*model.Dataset, error) {
	h := make([]byte, min(size, datasetHeaderLen+8))
	if _, err := r.ReadAt(h, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: read dataset blob: %v", model.ErrBadData, err)
	}
	if len(h) < datasetHeaderLen || [4]byte(h[:4]) != datasetMagic || (h[4] != datasetVersion && h[4] != datasetVersion2) || h[6]|h[7] != 0 {
		return nil, fmt.Errorf("%w: not a meshnode dataset blob (bad header)", model.ErrBadData)
	}
	hlen, tokLen := uint64(datasetHeaderLen), uint64(0)
	if h[4] == datasetVersion2 {
		if len(h) < datasetHeaderLen+8 {
			return nil, fmt.Errorf("%w: not a meshnode dataset blob (short header)", model.ErrBadData)
		}
		hlen, tokLen = datasetHeaderLen+8, binary.LittleEndian.Uint64(h[32:])
	}
	kind, vocab := h[5], binary.LittleEndian.Uint32(h[8:])
	srcLen := binary.LittleEndian.Uint32(h[12:])
	train, val := binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:])
	width := uint64(1)
	if kind == datasetKindUint16 {
		width = 2
	}
	rest := uint64(size) - hlen
	switch {
	case kind != datasetKindBytes && kind != datasetKindUint16:
		return nil, fmt.Errorf("%w: dataset blob has token kind %d", model.ErrBadData, kind)
	case vocab < 1 || vocab > 1<<16 || (kind == datasetKindBytes && vocab > 256):
		return nil, fmt.Errorf("%w: dataset blob has vocabulary %d for %d-byte tokens", model.ErrBadData, vocab, width)
	case uint64(size) < hlen || srcLen > maxDatasetSource || tokLen > maxDatasetTokenizer || train > rest || val > rest || uint64(srcLen)+tokLen+width*(train+val) != rest:
		return nil, fmt.Errorf("%w: dataset blob lengths (source %d, tokenizer %d, %d+%d tokens) do not match its %d bytes", model.ErrBadData, srcLen, tokLen, train, val, size)
	}
	meta := make([]byte, uint64(srcLen)+tokLen)
	if _, err := r.ReadAt(meta, int64(hlen)); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: read dataset blob: %v", model.ErrBadData, err)
	}
	ds := &model.Dataset{Source: string(meta[:srcLen]), Vocab: int(vocab)}
	if h[4] == datasetVersion2 {
		ds.Tokenizer = meta[srcLen:]
	}
	body := int64(hlen + uint64(srcLen) + tokLen)
	var err error
	if ds.Train, err = decodeTokens(r, body, int64(train), kind, vocab); err == nil {
		ds.Val, err = decodeTokens(r, body+int64(width*train), int64(val), kind, vocab)
	}
	return ds, err
}

// decodeChunk is how many bytes decodeTokens checks at a time.
const decodeChunk = 4 << 20

// decodeTokens checks n tokens at byte offset off of r against the vocabulary, a chunk at
// a time, and returns them read on demand.
func decodeTokens(r io.ReaderAt, off, n int64, kind byte, vocab uint32) (model.Tokens, error) {
	width := int64(1)
	if kind == datasetKindUint16 {
		width = 2
	}
	if kind == datasetKindUint16 || vocab < 256 {
		buf := make([]byte, decodeChunk)
		for pos := int64(0); pos < n*width; pos += decodeChunk {
			b := buf[:min(decodeChunk, n*width-pos)]
			if k, err := r.ReadAt(b, off+pos); k != len(b) {
				return model.Tokens{}, fmt.Errorf("%w: read dataset blob: %v", model.ErrBadData, err)
			}
			for i := 0; i < len(b); i += int(width) {
				v := uint32(b[i])
				if width == 2 {
					v = uint32(binary.LittleEndian.Uint16(b[i:]))
				}
				if v >= vocab {
					return model.Tokens{}, fmt.Errorf("%w: dataset blob holds token %d, vocabulary %d", model.ErrBadData, v, vocab)
				}
			}
		}
	}
	if width == 2 {
		return model.FileTokens(r, off, int(n)), nil
	}
	return model.FileByteTokens(r, off, int(n)), nil
}

// packTokens turns model tokens back into raw token bytes, block by block.
func packTokens(t model.Tokens, u16 bool) ([]byte, error) {
	width := 1
	if u16 {
		width = 2
	}
	out := make([]byte, 0, t.Len()*width)
	block := make([]int32, 64<<10)
	for off := 0; off < t.Len(); off += len(block) {
		w := block[:min(len(block), t.Len()-off)]
		if err := t.Window(w, off); err != nil {
			return nil, err
		}
		for _, v := range w {
			if u16 {
				out = binary.LittleEndian.AppendUint16(out, uint16(v))
			} else {
				out = append(out, byte(v))
			}
		}
	}
	return out, nil
}

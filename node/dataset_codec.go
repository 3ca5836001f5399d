package node

import (
	"bytes"
	"encoding/binary"
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

// decodeDataset decodes a dataset blob; byte tokens share b's memory. Every length is
// checked against len(b), and every token against the vocabulary.
func decodeDataset(b []byte) (*model.Dataset, error) {
	if len(b) < datasetHeaderLen || [4]byte(b[:4]) != datasetMagic || (b[4] != datasetVersion && b[4] != datasetVersion2) || b[6]|b[7] != 0 {
		return nil, fmt.Errorf("%w: not a meshnode dataset blob (bad header)", model.ErrBadData)
	}
	hlen, tokLen := uint64(datasetHeaderLen), uint64(0)
	if b[4] == datasetVersion2 {
		if len(b) < datasetHeaderLen+8 {
			return nil, fmt.Errorf("%w: not a meshnode dataset blob (short header)", model.ErrBadData)
		}
		hlen, tokLen = datasetHeaderLen+8, binary.LittleEndian.Uint64(b[32:])
	}
	kind, vocab := b[5], binary.LittleEndian.Uint32(b[8:])
	srcLen := binary.LittleEndian.Uint32(b[12:])
	train, val := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
	width := uint64(1)
	if kind == datasetKindUint16 {
		width = 2
	}
	rest := uint64(len(b)) - hlen
	switch {
	case kind != datasetKindBytes && kind != datasetKindUint16:
		return nil, fmt.Errorf("%w: dataset blob has token kind %d", model.ErrBadData, kind)
	case vocab < 1 || vocab > 1<<16 || (kind == datasetKindBytes && vocab > 256):
		return nil, fmt.Errorf("%w: dataset blob has vocabulary %d for %d-byte tokens", model.ErrBadData, vocab, width)
	case srcLen > maxDatasetSource || tokLen > maxDatasetTokenizer || train > rest || val > rest || uint64(srcLen)+tokLen+width*(train+val) != rest:
		return nil, fmt.Errorf("%w: dataset blob lengths (source %d, tokenizer %d, %d+%d tokens) do not match its %d bytes", model.ErrBadData, srcLen, tokLen, train, val, len(b))
	}
	src := b[hlen : hlen+uint64(srcLen)]
	tok := b[hlen+uint64(srcLen) : hlen+uint64(srcLen)+tokLen]
	body := b[hlen+uint64(srcLen)+tokLen:]
	ds := &model.Dataset{Source: string(src), Vocab: int(vocab)}
	if b[4] == datasetVersion2 {
		ds.Tokenizer = tok
	}
	cut := int(width * train)
	var err error
	if ds.Train, err = decodeTokens(body[:cut], kind, vocab); err == nil {
		ds.Val, err = decodeTokens(body[cut:], kind, vocab)
	}
	return ds, err
}

func decodeTokens(raw []byte, kind byte, vocab uint32) (model.Tokens, error) {
	if kind == datasetKindBytes {
		if vocab < 256 {
			for _, v := range raw {
				if uint32(v) >= vocab {
					return model.Tokens{}, fmt.Errorf("%w: dataset blob holds token %d, vocabulary %d", model.ErrBadData, v, vocab)
				}
			}
		}
		return model.ByteTokens(raw), nil
	}
	out := make([]uint16, len(raw)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(raw[2*i:])
		if uint32(out[i]) >= vocab {
			return model.Tokens{}, fmt.Errorf("%w: dataset blob holds token %d, vocabulary %d", model.ErrBadData, out[i], vocab)
		}
	}
	return model.Uint16Tokens(out), nil
}

// packTokens turns model tokens back into raw token bytes, block by block.
func packTokens(t model.Tokens, u16 bool) []byte {
	width := 1
	if u16 {
		width = 2
	}
	out := make([]byte, 0, t.Len()*width)
	block := make([]int32, 64<<10)
	for off := 0; off < t.Len(); off += len(block) {
		w := block[:min(len(block), t.Len()-off)]
		t.Window(w, off)
		for _, v := range w {
			if u16 {
				out = binary.LittleEndian.AppendUint16(out, uint16(v))
			} else {
				out = append(out, byte(v))
			}
		}
	}
	return out
}

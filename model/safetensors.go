package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/x448/float16"

	"github.com/meshnode/meshnode/internal/fsutil"
	"github.com/meshnode/meshnode/kernels"
)

// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length
// N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {string: string}}, then the data, offsets relative to its start. meshnode
// writes float32 ("F32") and reads it; a Hugging Face model directory's files may also hold
// F16 and BF16, widened to float32 as they are read (hf_weights.go).

// maxHeaderBytes bounds the JSON header, checked before it is read (the format's own
// limit is 100 MB).
const maxHeaderBytes = 100 << 20

// ErrBadCheckpoint is wrapped by every error about an unusable safetensors file.
var ErrBadCheckpoint = errors.New("bad checkpoint")

type tensorInfo struct {
	Dtype       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// TensorFile is the content of one safetensors file.
type TensorFile struct {
	Tensors  map[string]*kernels.Tensor
	Metadata map[string]string
}

// EncodeSafetensors writes tensors (sorted by name, data in that order) and metadata.
func EncodeSafetensors(w io.Writer, tensors map[string]*kernels.Tensor, metadata map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := make(map[string]any, len(names)+1)
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, n := range names {
		t := tensors[n]
		size := int64(len(t.Data)) * 4
		header[n] = tensorInfo{Dtype: "F32", Shape: append([]int{}, t.Shape...), DataOffsets: [2]int64{off, off + size}}
		off += size
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces so the data starts 8-byte aligned, as the reference does.
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hj)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hj); err != nil {
		return err
	}
	buf := make([]byte, 0, 1<<16)
	for _, n := range names {
		for _, v := range tensors[n].Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) == cap(buf) {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
	}
	_, err = w.Write(buf)
	return err
}

// DecodeSafetensors parses a whole safetensors file held in b. Every length and offset is
// checked against b before use; tensors must be F32, lie inside the data, and not overlap.
func DecodeSafetensors(b []byte) (*TensorFile, error) {
	return decodeSafetensors(b, decodeOptions{})
}

// decodeOptions widen what decodeSafetensors accepts: files written elsewhere (Hugging
// Face's) hold half-precision tensors and buffers that are not weights.
type decodeOptions struct {
	// widen accepts F16 and BF16 tensors, converted to float32 exactly.
	widen bool
	// skip, when set, names tensors left out unread (their offsets are still checked).
	skip func(name string) bool
}

func decodeSafetensors(b []byte, opt decodeOptions) (*TensorFile, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the 8-byte header length", ErrBadCheckpoint, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeaderBytes || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%w: header length %d exceeds the file (%d bytes) or the 100 MB limit", ErrBadCheckpoint, n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadCheckpoint, err)
	}
	data := b[8+n:]
	tf := &TensorFile{Tensors: make(map[string]*kernels.Tensor, len(raw)), Metadata: map[string]string{}}
	type span struct {
		lo, hi int64
		name   string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &tf.Metadata); err != nil {
				return nil, fmt.Errorf("%w: __metadata__: %v", ErrBadCheckpoint, err)
			}
			continue
		}
		var ti tensorInfo
		if err := json.Unmarshal(msg, &ti); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrBadCheckpoint, name, err)
		}
		if opt.skip != nil && opt.skip(name) {
			if lo, hi := ti.DataOffsets[0], ti.DataOffsets[1]; lo < 0 || hi < lo || hi > int64(len(data)) {
				return nil, fmt.Errorf("%w: tensor %q: offsets [%d, %d) outside the %d data bytes", ErrBadCheckpoint, name, lo, hi, len(data))
			}
		} else {
			t, err := decodeTensor(name, ti, data, opt.widen)
			if err != nil {
				return nil, err
			}
			tf.Tensors[name] = t
		}
		spans = append(spans, span{ti.DataOffsets[0], ti.DataOffsets[1], name})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return nil, fmt.Errorf("%w: tensors %q and %q overlap", ErrBadCheckpoint, spans[i-1].name, spans[i].name)
		}
	}
	return tf, nil
}

// elemBytes is the size of one element of each dtype meshnode reads.
var elemBytes = map[string]int64{"F32": 4, "F16": 2, "BF16": 2}

func decodeTensor(name string, ti tensorInfo, data []byte, widen bool) (*kernels.Tensor, error) {
	width, ok := elemBytes[ti.Dtype]
	if !ok || (!widen && ti.Dtype != "F32") {
		if widen {
			return nil, fmt.Errorf("%w: tensor %q has dtype %s; meshnode reads F32, F16 and BF16", ErrBadCheckpoint, name, ti.Dtype)
		}
		return nil, fmt.Errorf("%w: tensor %q has dtype %s; meshnode reads F32 only", ErrBadCheckpoint, name, ti.Dtype)
	}
	elems := int64(1)
	for _, d := range ti.Shape {
		if d < 0 || (d > 0 && elems > math.MaxInt32/int64(d)) {
			return nil, fmt.Errorf("%w: tensor %q has an invalid shape %v", ErrBadCheckpoint, name, ti.Shape)
		}
		elems *= int64(d)
	}
	lo, hi := ti.DataOffsets[0], ti.DataOffsets[1]
	if lo < 0 || hi < lo || hi > int64(len(data)) || hi-lo != width*elems {
		return nil, fmt.Errorf("%w: tensor %q: offsets [%d, %d) do not hold %s shape %v in %d data bytes", ErrBadCheckpoint, name, lo, hi, ti.Dtype, ti.Shape, len(data))
	}
	t := &kernels.Tensor{Shape: append([]int{}, ti.Shape...), Data: make([]float32, elems)}
	src := data[lo:hi]
	switch ti.Dtype {
	case "F32":
		for i := range t.Data {
			t.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case "F16":
		for i := range t.Data {
			t.Data[i] = float16.Frombits(binary.LittleEndian.Uint16(src[2*i:])).Float32()
		}
	case "BF16": // bfloat16 is float32's upper half: widening is a shift
		for i := range t.Data {
			t.Data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	}
	return t, nil
}

// ReadSafetensors reads and decodes the file at path.
func ReadSafetensors(path string) (*TensorFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	tf, err := DecodeSafetensors(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tf, nil
}

// WriteSafetensors writes the file at path atomically: a temporary file in the same
// directory, fsynced, then renamed over path.
func WriteSafetensors(path string, tensors map[string]*kernels.Tensor, metadata map[string]string) error {
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, tensors, metadata); err != nil {
		return err
	}
	return WriteFileAtomic(path, buf.Bytes())
}

// WriteFileAtomic writes data to path through a temporary file that is fsynced and then
// renamed, and fsyncs the directory, so a crash leaves either the old file or the new one
// and, once it returns, the new one.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

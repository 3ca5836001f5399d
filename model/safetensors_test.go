package model

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/kernels"
)

func sampleTensors() map[string]*kernels.Tensor {
	a := kernels.NewTensor(2, 3)
	for i := range a.Data {
		a.Data[i] = float32(i) - 1.5
	}
	b := kernels.NewTensor(4)
	b.Data[3] = 7
	return map[string]*kernels.Tensor{"x.weight": a, "x.bias": b}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteSafetensors(path, sampleTensors(), map[string]string{"n_head": "4"}); err != nil {
		t.Fatal(err)
	}
	tf, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if tf.Metadata["n_head"] != "4" || len(tf.Tensors) != 2 {
		t.Fatalf("read back %+v", tf)
	}
	w := tf.Tensors["x.weight"]
	if !w.SameShape([]int{2, 3}) || w.Data[5] != 3.5 || tf.Tensors["x.bias"].Data[3] != 7 {
		t.Fatalf("tensor data changed: %+v", w)
	}
}

func TestSafetensorsLayoutIsStandard(t *testing.T) {
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 {
		t.Fatalf("header length %d not 8-aligned", n)
	}
	header := string(b[8 : 8+n])
	// Sorted by name: x.bias (16 bytes) first, then x.weight (24 bytes).
	if !strings.Contains(header, `"x.bias":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}`) ||
		!strings.Contains(header, `"x.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]}`) {
		t.Fatalf("header %s", header)
	}
	if len(b) != 8+int(n)+40 {
		t.Fatalf("file is %d bytes, want %d", len(b), 8+int(n)+40)
	}
}

func TestSafetensorsRejectsBadFiles(t *testing.T) {
	var good bytes.Buffer
	EncodeSafetensors(&good, sampleTensors(), nil)
	hdr := func(json string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(json)))
		return append(append(b, json...), make([]byte, data)...)
	}
	cases := map[string][]byte{
		"short":          {1, 2},
		"huge header":    binary.LittleEndian.AppendUint64(nil, 1<<40),
		"truncated data": good.Bytes()[:good.Len()-4],
		"bad json":       hdr(`{"a":`, 0),
		"dtype":          hdr(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, 4),
		"shape/offsets":  hdr(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8),
		"negative shape": hdr(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0),
		"overlap": hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},`+
			`"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12),
	}
	for name, b := range cases {
		if _, err := DecodeSafetensors(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadParamsNamesMissingAndMisshapenTensors(t *testing.T) {
	cfg := tinyConfig()
	g := New(cfg, 1)
	tensors := ParamTensors(g.Params())
	tf := &TensorFile{Tensors: map[string]*kernels.Tensor{}}
	for k, v := range tensors {
		tf.Tensors[k] = v
	}
	delete(tf.Tensors, "transformer.h.1.mlp.c_fc.bias")
	if err := LoadParams(tf, New(cfg, 2).Params()); err == nil || !strings.Contains(err.Error(), "transformer.h.1.mlp.c_fc.bias is missing") {
		t.Fatalf("missing tensor: %v", err)
	}
	tf.Tensors["transformer.h.1.mlp.c_fc.bias"] = kernels.NewTensor(3)
	if err := LoadParams(tf, New(cfg, 2).Params()); err == nil || !strings.Contains(err.Error(), "has shape [3]") {
		t.Fatalf("mis-shaped tensor: %v", err)
	}
	// Config recovered from a checkpoint with metadata.
	tf = &TensorFile{Tensors: tensors, Metadata: cfg.Metadata()}
	got, err := ConfigFromCheckpoint(tf, 0)
	if err != nil || got != cfg {
		t.Fatalf("config from checkpoint %+v, %v; want %+v", got, err, cfg)
	}
}

func FuzzDecodeSafetensors(f *testing.F) {
	var good bytes.Buffer
	EncodeSafetensors(&good, sampleTensors(), map[string]string{"k": "v"})
	f.Add(good.Bytes())
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(binary.LittleEndian.AppendUint64(nil, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		tf, err := DecodeSafetensors(b)
		if err != nil {
			return
		}
		for name, tensor := range tf.Tensors {
			if kernels.ShapeSize(tensor.Shape) != len(tensor.Data) {
				t.Fatalf("%s: shape %v with %d elements", name, tensor.Shape, len(tensor.Data))
			}
		}
	})
}

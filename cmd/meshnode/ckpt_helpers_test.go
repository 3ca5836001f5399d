package main

import (
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// rewriteModel edits the tensor shapes of dir's model file: edit sees name → shape; a
// deleted name is dropped, a changed shape is written as a zero tensor of that shape.
func rewriteModel(t *testing.T, dir string, edit func(map[string][]int)) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	tf, err := model.ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int{}
	for n, ten := range tf.Tensors {
		shapes[n] = ten.Shape
	}
	edit(shapes)
	out := map[string]*kernels.Tensor{}
	for n, s := range shapes {
		if old := tf.Tensors[n]; old.SameShape(s) {
			out[n] = old
		} else {
			out[n] = kernels.NewTensor(s...)
		}
	}
	if err := model.WriteSafetensors(path, out, tf.Metadata); err != nil {
		t.Fatal(err)
	}
}

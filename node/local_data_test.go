package node

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// binPair writes a train.bin/val.bin pair of n tokens each (ids below 256) into dir.
func binPair(t *testing.T, dir string, n int) {
	t.Helper()
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i*7%256))
	}
	for _, f := range []string{"train.bin", "val.bin"} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalDataFlagAndValidation: --local-data values parse into names and paths, and each
// bad one is refused with an error naming it and saying what is wrong.
func TestLocalDataFlagAndValidation(t *testing.T) {
	dir := t.TempDir()
	bins := filepath.Join(dir, "bins")
	os.Mkdir(bins, 0o755)
	binPair(t, bins, 100)
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("hello"), 0o644)
	m, err := ParseLocalData([]string{"clinic-a=" + bins, "notes=" + text})
	if err != nil || m["clinic-a"] != bins || m["notes"] != text {
		t.Fatalf("parse: %v, %v", m, err)
	}
	if err := validateLocalData(m); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		values []string
		want   string
	}{
		{[]string{"nopath"}, `--local-data "nopath": want NAME=PATH`},
		{[]string{"a=" + bins, "a=" + text}, "given twice"},
		{[]string{"Bad/Name=" + bins}, "the name must be"},
		{[]string{"rel=data/x"}, "must be absolute"},
		{[]string{"gone=" + filepath.Join(dir, "gone")}, "no such file"},
		{[]string{"empty=" + dir}, "a directory without train.bin"},
		{[]string{"dev=/dev/null"}, "not a regular file or directory"},
	} {
		m, err := ParseLocalData(c.values)
		if err == nil {
			err = validateLocalData(m)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.values, err, c.want)
		}
	}
}

// TestLocalDatasetsOpenOnlyWhatTheOperatorExposed: a node opens a data.local dataset only
// by a name its operator gave; any other name, a path included, is refused naming
// data.local and the exposed names, and no file is read.
func TestLocalDatasetsOpenOnlyWhatTheOperatorExposed(t *testing.T) {
	bins := t.TempDir()
	binPair(t, bins, 200)
	l := &localDatasets{paths: map[string]string{"clinic-a": bins}}
	ds, err := l.load(context.Background(), "clinic-a", 256)
	if err != nil || ds.Train.Len() != 200 || ds.Val.Len() != 200 {
		t.Fatalf("exposed dataset: %v, %v", ds, err)
	}
	if again, _ := l.load(context.Background(), "clinic-a", 256); again != ds {
		t.Error("the dataset was opened twice")
	}
	for _, name := range []string{"clinic-b", bins, "/etc/passwd", "../clinic-a"} {
		_, err := l.load(context.Background(), name, 256)
		if !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), "data.local") || !strings.Contains(err.Error(), "[clinic-a]") {
			t.Errorf("name %q: got %v, want a refusal naming data.local and the exposed names", name, err)
		}
	}
	if _, err := l.load(context.Background(), "clinic-a", 100); !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), "token id") {
		t.Errorf("ids past model.vocab: got %v", err)
	}
}

// TestPublishLocalDataPublishesNothing: submitting a data.local job packs no blob: there is
// nothing of the data on the submitting node to ship.
func TestPublishLocalDataPublishesNothing(t *testing.T) {
	n := startNode(t, testConfig(t))
	id, vocab, err := n.PublishDataset(context.Background(), jobspec.Data{Local: "clinic-a"}, 256, "")
	if err != nil || id != "" || vocab != 256 {
		t.Fatalf("publish data.local: blob %q vocab %d err %v, want no blob", id, vocab, err)
	}
}

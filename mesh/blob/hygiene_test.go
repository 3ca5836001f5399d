package blob

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFetchRefusesWhatDoesNotFit: a manifest claiming more than the disk holds is refused
// before anything is written, with the sizes in the message; a small blob passes.
func TestFetchRefusesWhatDoesNotFit(t *testing.T) {
	dir := t.TempDir()
	free := freeBytes(dir)
	if free < 0 {
		t.Skip("free space cannot be told on this platform")
	}
	if err := checkFreeSpace(dir, 1<<20); free > 2*minFreeAfterFetch && err != nil {
		t.Fatalf("1 MiB with %d MiB free: %v", free>>20, err)
	}
	err := checkFreeSpace(dir, free)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a blob of all the free space: %v, want ErrNoSpace", err)
	}
	t.Log(err)
	if err := checkFreeSpace(dir, 1<<50); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a 1 PiB blob: %v, want ErrNoSpace", err)
	}
}

// TestOpenStoreSweepsTemporaryFiles: what a killed fetch, publish or write left behind is
// removed when the store opens again; blobs and other files stay.
func TestOpenStoreSweepsTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Publish(t.Context(), strings.NewReader("a blob that stays"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".fetch-123", ".publish-9", ".write-7", "keep.me"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err = OpenStore(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{".fetch-123": false, ".publish-9": false, ".write-7": false, "keep.me": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s present: %v, want %v", name, err == nil, want)
		}
	}
	if !s.Has(id) {
		t.Error("the published blob was swept")
	}
}

// TestStoreList: every held blob is listed with its size and a storage time; temporary
// and foreign files are not.
func TestStoreList(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, data := range []string{"first blob", "the second blob"} {
		id, err := s.Publish(t.Context(), strings.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		want[id] = int64(len(data))
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(want) {
		t.Fatalf("listed %+v, want %d blobs", held, len(want))
	}
	for _, h := range held {
		if want[h.ID] != h.Size || h.StoredAt.IsZero() {
			t.Errorf("listed %+v, want size %d and a time", h, want[h.ID])
		}
	}
}

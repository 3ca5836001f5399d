//go:build unix

package testnet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestnetDirIsPrivate: the testnet's directory (and the parents it creates) are made
// 0700, and a directory another user owns or may write into, or that another user could
// replace, is refused with a message that says what to do: by testnet's start, by `up`'s
// supervisor start and by LoadState (whose PIDs `testnet down` signals).
func TestTestnetDirIsPrivate(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "cache", "meshnode", "testnet")
	if err := PrivateDir(fresh); err != nil {
		t.Fatalf("a new dir: %v", err)
	}
	for _, d := range []string{fresh, filepath.Dir(fresh), filepath.Dir(filepath.Dir(fresh))} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s created with mode %v (%v); want 0700", d, st.Mode().Perm(), err)
		}
	}
	own := mkdir(t, base, "own-0755", 0o755)
	if err := PrivateDir(own); err != nil {
		t.Errorf("an existing dir of ours, 0755: %v", err)
	}
	sticky := mkdir(t, base, "tmp-like", 0o777|os.ModeSticky)
	if err := PrivateDir(filepath.Join(sticky, "tn")); err != nil {
		t.Errorf("a dir of ours in a sticky world-writable parent (as /tmp): %v", err)
	}

	worldWritable := mkdir(t, base, "world-writable", 0o777)
	openParent := mkdir(t, mkdir(t, base, "open-parent", 0o777), "tn", 0o700)
	link := filepath.Join(base, "link")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{
		worldWritable: "run `chmod go-w",
		openParent:    "anyone can replace the testnet dir",
		link:          "not a directory",
	}
	if os.Geteuid() == 0 {
		foreign := mkdir(t, base, "foreign", 0o700)
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused[foreign] = "owned by uid 65534, not by you"
	} else {
		t.Log("not root: the dir owned by another user is not tested")
	}
	for dir, want := range refused {
		if err := PrivateDir(dir); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("PrivateDir(%s): %v; want a refusal naming it and saying %q", dir, err, want)
		}
		tn := &Testnet{cfg: Config{Dir: dir}}
		if err := tn.prepareDir(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("testnet start in %s: %v; want it refused", dir, err)
		}
		if _, err := StartSupervisor(context.Background(), "/nonexistent/meshnode", nil, dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("testnet up in %s: %v; want it refused before anything runs", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"supervisor":1}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadState(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadState(%s): %v; want it refused", dir, err)
		}
	}
}

func mkdir(t *testing.T, parent, name string, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, mode); err != nil { // Mkdir's mode passes through the umask
		t.Fatal(err)
	}
	return d
}

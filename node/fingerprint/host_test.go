package fingerprint

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/meshnode/meshnode/mesh"
)

// hostOf runs the host detector over the given files (path → content) and hostname.
func hostOf(t *testing.T, files map[string]string, hostname string) (string, error) {
	t.Helper()
	d := &hostDetector{
		read: func(p string) ([]byte, error) {
			if v, ok := files[p]; ok {
				return []byte(v), nil
			}
			return nil, fs.ErrNotExist
		},
		name: func() (string, error) {
			if hostname == "" {
				return "", errors.New("no hostname")
			}
			return hostname, nil
		},
	}
	var p mesh.Profile
	err := d.Detect(context.Background(), &p)
	return p.Host, err
}

func TestHostIdentity(t *testing.T) {
	ids := map[string]string{"/etc/machine-id": "0123abcd\n", "/proc/sys/kernel/random/boot_id": "b00t-1\n"}
	a, err := hostOf(t, ids, "box")
	if err != nil || len(a) != 16 {
		t.Fatalf("host %q, %v: want 16 hex digits", a, err)
	}
	if b, _ := hostOf(t, ids, "other-name"); b != a {
		t.Errorf("same machine and boot id, another hostname: host %s, want %s", b, a)
	}
	rebooted := map[string]string{"/etc/machine-id": "0123abcd\n", "/proc/sys/kernel/random/boot_id": "b00t-2\n"}
	if b, _ := hostOf(t, rebooted, "box"); b == a {
		t.Errorf("another boot gave the same host %s", b)
	}
	other := map[string]string{"/etc/machine-id": "9999\n", "/proc/sys/kernel/random/boot_id": "b00t-1\n"}
	if b, _ := hostOf(t, other, "box"); b == a {
		t.Errorf("another machine gave the same host %s", b)
	}
	byName, err := hostOf(t, nil, "box")
	if err != nil || byName == "" || byName == a {
		t.Errorf("without ids: host %q, %v; want the hostname's hash", byName, err)
	}
	if h, err := hostOf(t, nil, ""); err == nil || h != "" {
		t.Errorf("nothing to name the host by: host %q, err %v; want an error", h, err)
	}
}

// TestHostLabelNamesTheMachine: a label replaces the machine's ids: two labels are two
// machines, one label one machine, whatever the ids.
func TestHostLabelNamesTheMachine(t *testing.T) {
	host := func(label string) string {
		var p mesh.Profile
		if err := newHostDetector(label).Detect(context.Background(), &p); err != nil {
			t.Fatal(err)
		}
		return p.Host
	}
	a, b, plain := host("rack-1"), host("rack-2"), host("")
	if a == b || a == plain || len(a) != 16 || host("rack-1") != a {
		t.Fatalf("labels rack-1 %q, rack-2 %q, none %q", a, b, plain)
	}
}

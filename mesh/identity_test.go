package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIdentityCreatedOnceAndReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", IdentityFile)
	k1, created, err := LoadOrCreateIdentity(path)
	if err != nil || !created {
		t.Fatalf("create: %v (created %v)", err, created)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %s, want 0600", st.Mode().Perm())
	}
	k2, created, err := LoadOrCreateIdentity(path)
	if err != nil || created {
		t.Fatalf("reuse: %v (created %v)", err, created)
	}
	if !k1.Equals(k2) {
		t.Error("second start made a new key")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key accepted: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := testConfig(t, testSecret)
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no identity":         func(c *Config) { c.Identity = nil },
		"no secret":           func(c *Config) { c.JoinSecret = "" },
		"short secret":        func(c *Config) { c.JoinSecret = "short" },
		"bad mesh":            func(c *Config) { c.Mesh = "Bad Name" },
		"dead before suspect": func(c *Config) { c.DeadAfter = c.SuspectAfter },
		"negative timeout":    func(c *Config) { c.AuthTimeout = -1 },
		"probe over limit":    func(c *Config) { c.Probe.MaxBytes = MaxProbeBytes + 1 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseBootstrap(t *testing.T) {
	id := testPeerID(t)
	infos, err := ParseBootstrap([]string{"/ip4/1.2.3.4/tcp/4242/p2p/" + id.String(), "/ip4/1.2.3.4/udp/4242/quic-v1/p2p/" + id.String()})
	if err != nil || len(infos) != 1 || len(infos[0].Addrs) != 2 {
		t.Fatalf("got %v, %v", infos, err)
	}
	if _, err := ParseBootstrap([]string{"/ip4/1.2.3.4/tcp/4242"}); err == nil || !strings.Contains(err.Error(), "/p2p/") {
		t.Errorf("address without peer id: %v", err)
	}
}

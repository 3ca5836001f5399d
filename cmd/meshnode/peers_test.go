package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
)

// TestPrintPeersShowsPaths: the peers table names the path tensors take to each peer and
// the bytes every kind of path carried.
func TestPrintPeersShowsPaths(t *testing.T) {
	var buf bytes.Buffer
	printPeers(&buf, []api.Peer{
		{ID: "relayedpeer", State: "alive", LastSeen: time.Now(), DataAddr: "relayed", Path: "relayed",
			PathBytes: map[string]int64{"relayed": 3 << 20, "inbound": 512}},
		{ID: "newpeer", State: "alive", LastSeen: time.Now()},
	})
	out := buf.String()
	for _, want := range []string{"PATH", "PATH BYTES", "inbound 512 B, relayed 3.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("peers table lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "newpeer") && len(strings.Fields(line)) < 8 {
			t.Errorf("a peer with no path has missing columns: %q", line)
		}
	}
}

// TestPrintPeersShowsProofs: the PROVED column shows what each peer proved of its speed,
// "lie" after a wrong answer, "-" before any proof.
func TestPrintPeersShowsProofs(t *testing.T) {
	var buf bytes.Buffer
	zero, rate := 0.0, 42.3
	printPeers(&buf, []api.Peer{
		{ID: "honest", State: "alive", LastSeen: time.Now(), ProvedGFLOPS: &rate},
		{ID: "liar", State: "alive", LastSeen: time.Now(), ProvedGFLOPS: &zero, SpeedLie: true},
		{ID: "new", State: "alive", LastSeen: time.Now()},
	})
	want := map[string]string{"honest": "42.3", "liar": "lie", "new": "-"}
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || want[f[0]] == "" {
			continue
		}
		if got := f[len(f)-3]; got != want[f[0]] {
			t.Errorf("%s: PROVED %q, want %q:\n%s", f[0], got, want[f[0]], buf.String())
		}
		delete(want, f[0])
	}
	if len(want) > 0 {
		t.Errorf("peers missing from the table: %v\n%s", want, buf.String())
	}
}

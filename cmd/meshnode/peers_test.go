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

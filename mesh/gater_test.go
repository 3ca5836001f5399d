package mesh

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A ban for a wrong proof ends after its TTL: the peer may try again (a node whose operator
// fixed its secret is not locked out until this node restarts).
func TestGaterBanExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(nil, time.Minute)
	g.now = func() time.Time { return now }
	p := peer.ID("wrong-proof")
	g.ban(p)
	if g.permits(p) {
		t.Fatal("a banned peer is permitted")
	}
	now = now.Add(59 * time.Second)
	if g.permits(p) {
		t.Fatal("the ban ended early")
	}
	now = now.Add(time.Second)
	if !g.permits(p) {
		t.Fatal("the ban did not end after its TTL")
	}
	if len(g.refused) != 0 {
		t.Errorf("expired ban still held: %v", g.refused)
	}
}

// A zero ban duration no longer means forever.
func TestGaterDefaultBanIsFinite(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(nil, 0)
	g.now = func() time.Time { return now }
	g.ban("p")
	now = now.Add(defaultBanDuration)
	if !g.permits("p") {
		t.Fatal("a ban with the default duration never ends")
	}
}

// A shorter refusal (a hold-off after timeouts) never shortens a ban already in force.
func TestGaterRefuseKeepsTheLongerEnd(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(nil, time.Hour)
	g.now = func() time.Time { return now }
	g.ban("p")
	g.refuse("p", time.Second)
	now = now.Add(time.Minute)
	if g.permits("p") {
		t.Fatal("a hold-off cut a ban short")
	}
}

// A flood of failing identities cannot grow the map past its bound: expired entries go
// first, then the one ending soonest; the newest refusal always holds.
func TestGaterRefusalsAreBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(nil, time.Hour)
	g.now = func() time.Time { return now }
	g.max = 8
	g.refuse("short", time.Second)
	for i := range 7 {
		g.ban(peer.ID(fmt.Sprintf("p%d", i)))
	}
	now = now.Add(2 * time.Second) // "short" has expired, still in the map
	g.ban("new")
	if _, held := g.refused["short"]; held || len(g.refused) != 8 || g.permits("new") || g.permits("p0") {
		t.Fatalf("after evicting the expired entry: %d entries (short held: %v), new permitted %v", len(g.refused), held, g.permits("new"))
	}
	for i := range 1000 {
		now = now.Add(time.Millisecond)
		g.ban(peer.ID(fmt.Sprintf("flood%d", i)))
		if len(g.refused) > g.max {
			t.Fatalf("%d refusals held, bound %d", len(g.refused), g.max)
		}
	}
	if g.permits("flood999") {
		t.Fatal("the newest ban was evicted")
	}
	if !g.permits("p0") {
		t.Fatal("the ban ending soonest was kept while the map overflowed")
	}
}

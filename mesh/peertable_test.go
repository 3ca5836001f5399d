package mesh

import (
	"testing"
	"time"
)

func TestPeerTableStates(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newPeerTable(time.Second, 3*time.Second, time.Minute)
	tab.now = func() time.Time { return now }
	p := testPeerID(t)
	hb := &heartbeat{ID: p.String(), Mesh: "m", Seq: 10, Addrs: []string{"/ip4/1.2.3.4/tcp/1"}, Profile: &Profile{Cores: 4}}
	if !tab.observe(p, hb) {
		t.Error("first heartbeat is not a join")
	}
	steps := []struct {
		advance time.Duration
		want    PeerState
	}{{0, StateAlive}, {999 * time.Millisecond, StateAlive}, {time.Millisecond, StateSuspect}, {2 * time.Second, StateDead}}
	for _, s := range steps {
		now = now.Add(s.advance)
		if got, _ := tab.state(p); got != s.want {
			t.Fatalf("after %s: %s, want %s", s.advance, got, s.want)
		}
	}
	// A stale heartbeat (lower sequence) does not revive it.
	if tab.observe(p, &heartbeat{ID: p.String(), Mesh: "m", Seq: 9}); mustState(t, tab, p) != StateDead {
		t.Error("stale heartbeat revived a dead peer")
	}
	if !tab.observe(p, &heartbeat{ID: p.String(), Mesh: "m", Seq: 11}) {
		t.Error("a dead peer's new heartbeat is not a join")
	}
	if got := tab.snapshot(); len(got) != 1 || got[0].Profile == nil || got[0].Profile.Cores != 4 {
		t.Errorf("profile lost: %+v", got)
	}
	tab.observe(p, &heartbeat{ID: p.String(), Mesh: "m", Seq: 12, Leaving: true})
	if mustState(t, tab, p) != StateDead {
		t.Error("a leaving peer is not dead")
	}
	now = now.Add(time.Minute)
	if got := tab.snapshot(); len(got) != 0 {
		t.Errorf("dead peer not forgotten: %+v", got)
	}
}

func mustState(t *testing.T, tab *peerTable, p interface{ String() string }) PeerState {
	t.Helper()
	for _, pi := range tab.snapshot() {
		if pi.ID.String() == p.String() {
			return pi.State
		}
	}
	t.Fatal("peer missing")
	return ""
}

package mesh

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Observed IPs count only the peers the caller trusts (admitted ones), rank by how many
// peers saw the address, return at most the bound, and remember a bounded number of
// observers.
func TestObservationsTop(t *testing.T) {
	var o observations
	ids := make([]peer.ID, 5)
	for i := range ids {
		ids[i] = testPeerID(t)
	}
	a, b, c := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("192.0.2.1")
	o.record(ids[0], a)
	o.record(ids[1], b)
	o.record(ids[2], b)
	o.record(ids[3], c)
	o.record(ids[4], c) // not admitted below
	admitted := func(p peer.ID) bool { return p != ids[4] }
	if got := o.top(admitted, 2); !slices.Equal(got, []netip.Addr{b, c}) {
		t.Errorf("top 2 = %v, want [%v %v] (b has two observers, a and c one; c < a)", got, b, c)
	}
	if got := o.top(func(peer.ID) bool { return false }, 2); len(got) != 0 {
		t.Errorf("no admitted peer, got %v", got)
	}
	for range maxObservers + 10 {
		o.record(testPeerID(t), a)
	}
	if n := len(o.byID); n > maxObservers {
		t.Errorf("%d observers remembered, bound %d", n, maxObservers)
	}
}

func TestUsableObservedIP(t *testing.T) {
	for s, want := range map[string]bool{"10.211.0.2": true, "2001:db8::1": true, "127.0.0.1": false, "::1": false,
		"fe80::1": false, "0.0.0.0": false, "224.0.0.1": false, "169.254.1.1": false} {
		if got := usableObservedIP(netip.MustParseAddr(s)); got != want {
			t.Errorf("%s: %v, want %v", s, got, want)
		}
	}
}

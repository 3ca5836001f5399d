package mesh

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Defaults of the gater's refusals.
const (
	// defaultBanDuration is how long a peer that sent a wrong proof is refused when
	// Config.BanDuration is zero.
	defaultBanDuration = time.Hour
	// maxRefused bounds the gater's refusal map: peer IDs are free to mint, so a flood of
	// failing identities must not grow it without limit.
	maxRefused = 4096
)

// gater is the mesh's connection gater: it refuses peers outside the allowlist (when there
// is one) and peers refused for a while after failing admission, at dial time and again
// once the remote's identity is known.
//
// Every refusal expires (a wrong proof after banFor, a peer that stayed silent through its
// auth attempts after a shorter hold-off), and at most maxRefused are kept: when the map is
// full, expired entries go first, then the one that would have ended soonest. A refusal is
// a rate limit on peers that fail, not an access list; the join secret is the access list.
type gater struct {
	allow  map[peer.ID]bool // nil: everyone may try to authenticate
	banFor time.Duration    // > 0
	max    int
	now    func() time.Time
	// addrFilter, when set (tests: a NAT between two members), refuses dials to the
	// addresses it returns false for.
	addrFilter func(peer.ID, ma.Multiaddr) bool

	mu       sync.Mutex
	refused  map[peer.ID]time.Time // value: end of the refusal
	isolated map[peer.ID]bool      // Mesh.Isolate: refused until the set is replaced
}

func newGater(allow []peer.ID, banFor time.Duration) *gater {
	if banFor <= 0 {
		banFor = defaultBanDuration
	}
	g := &gater{banFor: banFor, max: maxRefused, now: time.Now, refused: map[peer.ID]time.Time{}}
	if len(allow) > 0 {
		g.allow = make(map[peer.ID]bool, len(allow))
		for _, p := range allow {
			g.allow[p] = true
		}
	}
	return g
}

// ban refuses p for banFor: it sent a wrong proof or broke the auth protocol.
func (g *gater) ban(p peer.ID) { g.refuse(p, g.banFor) }

// refuse refuses p for d from now, unless p is already refused for longer.
func (g *gater) refuse(p peer.ID, d time.Duration) {
	until := g.now().Add(d)
	g.mu.Lock()
	defer g.mu.Unlock()
	old, ok := g.refused[p]
	if ok && old.After(until) {
		return
	}
	if !ok && len(g.refused) >= g.max {
		g.evictLocked()
	}
	g.refused[p] = until
}

// evictLocked makes room for one entry: every expired refusal goes, and if none had, the
// one ending soonest.
func (g *gater) evictLocked() {
	now := g.now()
	var soonest peer.ID
	var soonestEnd time.Time
	for p, until := range g.refused {
		if !now.Before(until) {
			delete(g.refused, p)
			continue
		}
		if soonest == "" || until.Before(soonestEnd) {
			soonest, soonestEnd = p, until
		}
	}
	if len(g.refused) >= g.max {
		delete(g.refused, soonest)
	}
}

// isBanned reports whether p is currently refused for failing admission.
func (g *gater) isBanned(p peer.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.refused[p]
	if !ok {
		return false
	}
	if !g.now().Before(until) {
		delete(g.refused, p)
		return false
	}
	return true
}

// permits reports whether p may connect at all.
func (g *gater) permits(p peer.ID) bool {
	if g.allow != nil && !g.allow[p] {
		return false
	}
	return !g.isIsolated(p) && !g.isBanned(p)
}

// isolate replaces the set of peers refused by Mesh.Isolate.
func (g *gater) isolate(peers []peer.ID) {
	set := make(map[peer.ID]bool, len(peers))
	for _, p := range peers {
		set[p] = true
	}
	g.mu.Lock()
	g.isolated = set
	g.mu.Unlock()
}

func (g *gater) isIsolated(p peer.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.isolated[p]
}

func (g *gater) InterceptPeerDial(p peer.ID) bool { return g.permits(p) }
func (g *gater) InterceptAddrDial(p peer.ID, a ma.Multiaddr) bool {
	return g.permits(p) && (g.addrFilter == nil || g.addrFilter(p, a))
}
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool                     { return true }
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.permits(p)
}

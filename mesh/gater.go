package mesh

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// gater is the mesh's connection gater: it refuses peers outside the allowlist (when there
// is one) and peers banned after failing admission, at dial time and again once the
// remote's identity is known.
type gater struct {
	allow  map[peer.ID]bool // nil: everyone may try to authenticate
	banFor time.Duration    // 0: forever
	now    func() time.Time

	mu     sync.Mutex
	banned map[peer.ID]time.Time // value: end of the ban, zero for forever
}

func newGater(allow []peer.ID, banFor time.Duration) *gater {
	g := &gater{banFor: banFor, now: time.Now, banned: map[peer.ID]time.Time{}}
	if len(allow) > 0 {
		g.allow = make(map[peer.ID]bool, len(allow))
		for _, p := range allow {
			g.allow[p] = true
		}
	}
	return g
}

// ban refuses p from now on (for banFor, when set).
func (g *gater) ban(p peer.ID) {
	var until time.Time
	if g.banFor > 0 {
		until = g.now().Add(g.banFor)
	}
	g.mu.Lock()
	g.banned[p] = until
	g.mu.Unlock()
}

// isBanned reports whether p is currently refused for failing admission.
func (g *gater) isBanned(p peer.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.banned[p]
	if !ok {
		return false
	}
	if !until.IsZero() && g.now().After(until) {
		delete(g.banned, p)
		return false
	}
	return true
}

// permits reports whether p may connect at all.
func (g *gater) permits(p peer.ID) bool {
	if g.allow != nil && !g.allow[p] {
		return false
	}
	return !g.isBanned(p)
}

func (g *gater) InterceptPeerDial(p peer.ID) bool                                { return g.permits(p) }
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool                { return g.permits(p) }
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool                     { return true }
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.permits(p)
}

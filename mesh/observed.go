package mesh

import (
	"context"
	"net/netip"
	"sort"
	"sync"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Bounds on the addresses peers observe this host at (identify's ObservedAddr).
const (
	// maxObservers is the most peers whose observation is remembered; past it, one is
	// forgotten for each new one.
	maxObservers = 256
	// MaxObservedIPs is the most observed IPs ObservedIPs returns.
	MaxObservedIPs = 2
)

// observations remembers, per peer, the IP address that peer's identify response said it
// sees this host at. libp2p's own observed-address manager only advertises an address
// that four or more peers confirm, which a mesh of a few machines never reaches; the data
// plane confirms every candidate by an authenticated handshake, so one observer is enough
// to make an address worth trying.
type observations struct {
	mu   sync.Mutex
	byID map[peer.ID]netip.Addr
}

func (o *observations) record(p peer.ID, ip netip.Addr) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID = map[peer.ID]netip.Addr{}
	}
	if _, ok := o.byID[p]; !ok && len(o.byID) >= maxObservers {
		for old := range o.byID {
			delete(o.byID, old)
			break
		}
	}
	o.byID[p] = ip
}

// top returns the observed IPs of the peers that count, most observers first (ties in
// address order), at most n.
func (o *observations) top(counts func(peer.ID) bool, n int) []netip.Addr {
	o.mu.Lock()
	votes := map[netip.Addr]int{}
	for p, ip := range o.byID {
		if counts(p) {
			votes[ip]++
		}
	}
	o.mu.Unlock()
	out := make([]netip.Addr, 0, len(votes))
	for ip := range votes {
		out = append(out, ip)
	}
	sort.Slice(out, func(i, j int) bool {
		if votes[out[i]] != votes[out[j]] {
			return votes[out[i]] > votes[out[j]]
		}
		return out[i].Less(out[j])
	})
	return out[:min(n, len(out))]
}

// ObservedIPs returns the IP addresses admitted peers observe this host at (the
// ObservedAddr of their identify responses), those seen by the most peers first, at most
// MaxObservedIPs. Behind a NAT it is the NAT's public address; on a cloud VM with a
// one-to-one NAT, the public address its interfaces do not show. Unverified: a peer may
// claim anything, so callers use them as candidates to confirm, never as facts.
func (m *Mesh) ObservedIPs() []netip.Addr {
	return m.observed.top(m.IsAdmitted, MaxObservedIPs)
}

// startObserving subscribes to identify's results (before any peer is dialled, so that
// none is missed) and records the observed address of every identified connection until
// the mesh closes.
func (m *Mesh) startObserving() {
	sub, err := m.host.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		m.log.Warn("observed addresses unavailable", "err", err)
		return
	}
	m.goLoop(func(ctx context.Context) { m.observeLoop(ctx, sub) })
}

func (m *Mesh) observeLoop(ctx context.Context, sub event.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Out():
			if !ok {
				return
			}
			e := ev.(event.EvtPeerIdentificationCompleted)
			if e.ObservedAddr == nil {
				continue
			}
			nip, err := manet.ToIP(e.ObservedAddr)
			if err != nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(nip)
			if ok && usableObservedIP(ip.Unmap()) {
				m.observed.record(e.Peer, ip.Unmap())
			}
		}
	}
}

// usableObservedIP reports whether an observed IP may be announced: unicast, not
// loopback (the node announces its own), not link-local (it would need a zone).
func usableObservedIP(ip netip.Addr) bool {
	return ip.IsValid() && !ip.IsUnspecified() && !ip.IsLoopback() && !ip.IsMulticast() &&
		!ip.IsLinkLocalUnicast() && !ip.IsInterfaceLocalMulticast()
}

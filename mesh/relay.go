package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
)

// Kinds of libp2p connection a member is reached over (ConnPath).
const (
	// PathRelayed: only through a circuit relay (a limited connection).
	PathRelayed = "relayed"
	// PathHolePunched: a direct connection that hole punching (DCUtR) opened.
	PathHolePunched = "hole-punched"
	// PathLibp2p: a direct connection that was dialled or accepted as usual.
	PathLibp2p = "libp2p"
)

// MaxRelays is the most members a node behind a NAT holds relay reservations on.
const MaxRelays = 2

// RelayConfig bounds what this node carries as a circuit relay v2 for other members, and
// what it asks of relays. Every member runs the relay service (with NAT on), for admitted
// members only; the defaults suit tensors between two members behind NATs, far above
// libp2p's own (2 min, 128 KiB per circuit), which are meant for a hole punch's
// coordination. A circuit that reaches a limit is reset; the next frame opens another.
type RelayConfig struct {
	// MaxReservations is the most members holding a reservation on this node. Zero: 64.
	MaxReservations int
	// MaxCircuits is the most relayed connections open to or from one member. Zero: 8.
	MaxCircuits int
	// CircuitBytes is the most bytes one relayed connection carries in each direction
	// before the relay resets it. Zero: 4 GiB.
	CircuitBytes int64
	// CircuitDuration is the longest a relayed connection stays open. Zero: 1 h.
	CircuitDuration time.Duration
	// BufferSize is the relay's buffer per relayed connection and direction. Zero: 256 KiB
	// (libp2p's 2 KiB would bound a circuit to a few MB/s on a WAN).
	BufferSize int
	// ReservationTTL is how long a reservation lasts before it must be refreshed. Zero: 1 h.
	ReservationTTL time.Duration
}

func (r RelayConfig) validate() error {
	if r.MaxReservations < 0 || r.MaxCircuits < 0 || r.CircuitBytes < 0 || r.CircuitDuration < 0 ||
		r.BufferSize < 0 || r.ReservationTTL < 0 {
		return errors.New("relay limits must be ≥ 0")
	}
	return nil
}

// resources is what libp2p's relay service is configured with.
func (r RelayConfig) resources() relay.Resources {
	res := relay.DefaultResources()
	res.MaxReservations = orDefault(r.MaxReservations, 64)
	res.MaxCircuits = orDefault(r.MaxCircuits, 8)
	res.BufferSize = orDefault(r.BufferSize, 256<<10)
	res.ReservationTTL = orDefault(r.ReservationTTL, time.Hour)
	res.Limit = &relay.RelayLimit{
		Duration: orDefault(r.CircuitDuration, time.Hour),
		Data:     orDefault(r.CircuitBytes, int64(4)<<30),
	}
	return res
}

// relayACL lets the relay service carry circuits between admitted members only: an
// outsider can neither reserve a slot nor reach, or be reached from, a member through
// this node. Refusals are counted (Stats.RelayRefused) and logged at debug level only, so
// that an outsider's attempts cannot flood the log.
type relayACL struct{ m *Mesh }

func (a relayACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	if a.m.IsAdmitted(p) {
		return true
	}
	a.m.relayRefused.Add(1)
	a.m.log.Debug("relay: refused a reservation of a peer not admitted", "peer", p)
	return false
}

func (a relayACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dest peer.ID) bool {
	if a.m.IsAdmitted(src) && a.m.IsAdmitted(dest) {
		return true
	}
	a.m.relayRefused.Add(1)
	a.m.log.Debug("relay: refused a circuit not between admitted members", "src", src, "dest", dest)
	return false
}

// startRelay runs the circuit relay v2 service on the host with the configured limits and
// the admission ACL.
func (m *Mesh) startRelay() error {
	r, err := relay.New(m.host, relay.WithResources(m.cfg.Relay.resources()), relay.WithACL(relayACL{m}))
	if err != nil {
		return fmt.Errorf("start relay service: %w", err)
	}
	m.relaySvc = r
	return nil
}

// punches records the members hole punching reached directly (holepunch.EventTracer), at
// most maxPunched (past it, one is forgotten for each new one), and tells notify.
type punches struct {
	notify func(peer.ID) // Config.OnHolePunched; nil: nobody
	mu     sync.Mutex
	ok     map[peer.ID]bool
}

// maxPunched bounds the peers punches remembers.
const maxPunched = 1024

func (p *punches) Trace(evt *holepunch.Event) {
	e, ok := evt.Evt.(*holepunch.EndHolePunchEvt)
	if !ok || !e.Success {
		return
	}
	p.mu.Lock()
	if p.ok == nil {
		p.ok = map[peer.ID]bool{}
	}
	if _, known := p.ok[evt.Remote]; !known && len(p.ok) >= maxPunched {
		for old := range p.ok {
			delete(p.ok, old)
			break
		}
	}
	p.ok[evt.Remote] = true
	p.mu.Unlock()
	if p.notify != nil {
		go p.notify(evt.Remote)
	}
}

func (p *punches) punched(id peer.ID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok[id]
}

// ConnPath is the kind of libp2p connection this node holds with p: PathLibp2p or
// PathHolePunched for a direct one (preferred), PathRelayed when only a circuit relay
// connects them, "" when not connected.
func (m *Mesh) ConnPath(p peer.ID) string {
	relayed := false
	for _, c := range m.host.Network().ConnsToPeer(p) {
		if isRelayed(c) {
			relayed = true
			continue
		}
		if m.punches.punched(p) {
			return PathHolePunched
		}
		return PathLibp2p
	}
	if relayed {
		return PathRelayed
	}
	return ""
}

// StreamPath is the kind of connection stream s rides: PathRelayed, PathHolePunched or
// PathLibp2p.
func (m *Mesh) StreamPath(s network.Stream) string {
	switch {
	case isRelayed(s.Conn()):
		return PathRelayed
	case m.punches.punched(s.Conn().RemotePeer()):
		return PathHolePunched
	}
	return PathLibp2p
}

func isRelayed(c network.Conn) bool {
	if c.Stat().Limited {
		return true
	}
	_, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// connected reports whether p is connected, directly or through a relay.
func (m *Mesh) connected(p peer.ID) bool { return connectedAny(m.host.Network(), p) }

// connectedAny reports whether n holds a connection with p, direct or relayed (limited).
func connectedAny(n network.Network, p peer.ID) bool {
	c := n.Connectedness(p)
	return c == network.Connected || c == network.Limited
}

// reservation is a slot this node holds on a relay, and the circuit address it announces.
type reservation struct {
	addr    ma.Multiaddr
	expires time.Time
}

// relayState is this node's reservations, by relay.
type relayState struct {
	mu   sync.Mutex
	held map[peer.ID]reservation
}

// RelayAddrs are the circuit addresses of this node's live reservations, announced in its
// heartbeats so that members that cannot dial it reach it through a relay.
func (m *Mesh) RelayAddrs() []ma.Multiaddr {
	m.relays.mu.Lock()
	defer m.relays.mu.Unlock()
	var out []ma.Multiaddr
	for _, r := range m.relays.held {
		if time.Now().Before(r.expires) {
			out = append(out, r.addr)
		}
	}
	slices.SortFunc(out, func(a, b ma.Multiaddr) int { return cmpString(a.String(), b.String()) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// relayLoop keeps reservations on up to MaxRelays members while this node is behind a
// NAT, checked every heartbeat.
func (m *Mesh) relayLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.heartbeatInterval())
	defer t.Stop()
	for {
		m.reserveRelays(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reserveRelays drops reservations on members no longer connected and, behind a NAT,
// reserves (or refreshes, in the last quarter of their life) slots on members this node
// dialled directly, which are therefore reachable.
func (m *Mesh) reserveRelays(ctx context.Context) {
	m.relays.mu.Lock()
	for p := range m.relays.held {
		if !m.IsAdmitted(p) {
			delete(m.relays.held, p)
		}
	}
	m.relays.mu.Unlock()
	if !m.behindNAT() {
		return
	}
	ttl := m.cfg.Relay.resources().ReservationTTL
	for _, p := range m.relayCandidatesNow() {
		m.relays.mu.Lock()
		r, ok := m.relays.held[p.id]
		m.relays.mu.Unlock()
		if ok && time.Until(r.expires) > ttl/4 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rsvp, err := client.Reserve(rctx, m.host, peer.AddrInfo{ID: p.id})
		cancel()
		if err != nil {
			m.log.Debug("relay reservation", "relay", p.id, "err", err)
			continue
		}
		addr := p.addr.Encapsulate(ma.StringCast("/p2p/" + p.id.String() + "/p2p-circuit"))
		m.relays.mu.Lock()
		if m.relays.held == nil {
			m.relays.held = map[peer.ID]reservation{}
		}
		m.relays.held[p.id] = reservation{addr: addr, expires: rsvp.Expiration}
		m.relays.mu.Unlock()
		if !ok {
			m.log.Info("relay reservation held", "relay", p.id, "addr", addr, "expires", rsvp.Expiration)
		}
	}
}

type relayCandidate struct {
	id   peer.ID
	addr ma.Multiaddr // where this node reached it
}

// relayCandidatesNow lists admitted members this node holds a direct connection to that it
// dialled (a member reachable from behind this node's NAT), by peer ID, with the address it
// dialled them at, at most MaxRelays: those holding a reservation first.
func (m *Mesh) relayCandidatesNow() []relayCandidate {
	var held, other []relayCandidate
	for _, c := range m.host.Network().Conns() {
		p := c.RemotePeer()
		if isRelayed(c) || c.Stat().Direction != network.DirOutbound || !m.IsAdmitted(p) {
			continue
		}
		rc := relayCandidate{id: p, addr: c.RemoteMultiaddr()}
		m.relays.mu.Lock()
		_, ok := m.relays.held[p]
		m.relays.mu.Unlock()
		if ok {
			held = append(held, rc)
		} else {
			other = append(other, rc)
		}
	}
	byID := func(a, b relayCandidate) int { return cmpString(string(a.id), string(b.id)) }
	slices.SortFunc(held, byID)
	slices.SortFunc(other, byID)
	out := slices.CompactFunc(append(held, other...), func(a, b relayCandidate) bool { return a.id == b.id })
	return out[:min(len(out), MaxRelays)]
}

// behindNAT reports whether admitted members observe this host at an address none of its
// interfaces holds: it sits behind a NAT, and members it has not dialled may be unable to
// reach it. (AutoNAT needs several public observers and public addresses to reach a
// verdict; a mesh of a few machines, or of private networks, may never give one.)
func (m *Mesh) behindNAT() bool {
	observed := m.ObservedIPs()
	if len(observed) == 0 {
		return false
	}
	own := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			own[pfx.Addr().Unmap()] = true
		}
	}
	for _, ip := range observed {
		if own[ip] {
			return false
		}
	}
	return true
}

package testnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Relay bounds.
const (
	maxDatagram     = 64 << 10
	maxRelaySession = 1024
	relaySocketBuf  = 4 << 20
)

// Relay is the WAN emulator in front of one member's data plane. It listens on the address
// the member advertises, forwards each packet to the member's real data-plane address
// (SetTarget) over the emulated link from the packet's sender, and carries the replies
// back over the link the other way. Each sender gets its own upstream socket, so flows
// stay separate and the member sees one peer address per sender. Senders are known by
// their real data-plane addresses (Network.SetAddr); packets from anyone else, and packets
// that arrive before SetTarget, are dropped (QUIC retransmits).
type Relay struct {
	net    *Network
	member string
	conn   *net.UDPConn
	target atomic.Pointer[netip.AddrPort]

	mu       sync.Mutex
	sessions map[netip.AddrPort]*relaySession
	closed   bool
	wg       sync.WaitGroup

	// Unknown counts packets dropped because their sender is not a member.
	unknown atomic.Uint64
}

// relaySession is one sender's flow through the relay.
type relaySession struct {
	r        *Relay
	from     string         // the sender's member name
	src      netip.AddrPort // the sender's address
	upstream *net.UDPConn   // connected to the target
}

// NewRelay listens on listen (host:port, port 0 for any) in front of member.
func NewRelay(nw *Network, member, listen string) (*Relay, error) {
	if _, ok := nw.region[member]; !ok {
		return nil, fmt.Errorf("relay for %q: %w", member, ErrUnknownName)
	}
	addr, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return nil, fmt.Errorf("relay for %s: %w", member, err)
	}
	network := "udp4"
	if addr.IP != nil && addr.IP.To4() == nil {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, addr)
	if err != nil {
		return nil, fmt.Errorf("relay for %s: %w", member, err)
	}
	_ = conn.SetReadBuffer(relaySocketBuf)
	_ = conn.SetWriteBuffer(relaySocketBuf)
	r := &Relay{net: nw, member: member, conn: conn, sessions: map[netip.AddrPort]*relaySession{}}
	r.wg.Add(1)
	go r.readDownstream()
	return r, nil
}

// Addr is the address the relay listens on: what the member advertises.
func (r *Relay) Addr() netip.AddrPort {
	return r.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// SetTarget sets the member's real data-plane address. Flows of an earlier target are
// closed.
func (r *Relay) SetTarget(addr netip.AddrPort) {
	a := netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	r.target.Store(&a)
	r.mu.Lock()
	old := r.sessions
	r.sessions = map[netip.AddrPort]*relaySession{}
	r.mu.Unlock()
	for _, s := range old {
		s.upstream.Close()
	}
}

// Unknown counts packets dropped because they came from no member.
func (r *Relay) Unknown() uint64 { return r.unknown.Load() }

// Close stops the relay: its sockets close and its goroutines end before Close returns.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	sessions := r.sessions
	r.sessions = nil
	r.mu.Unlock()
	err := r.conn.Close()
	for _, s := range sessions {
		s.upstream.Close()
	}
	r.wg.Wait()
	return err
}

// readDownstream reads packets sent to the relay and forwards them toward the member.
func (r *Relay) readDownstream() {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, src, err := r.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s := r.session(src)
		if s == nil {
			continue
		}
		data := append([]byte(nil), buf[:n]...)
		r.net.send(s.from, r.member, data, s.toMember)
	}
}

// session returns the flow of the sender at src, opening it on first use; nil when the
// sender is no member, no target is set, or the relay is closed or full.
func (r *Relay) session(src netip.AddrPort) *relaySession {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	r.mu.Lock()
	s := r.sessions[src]
	r.mu.Unlock()
	if s != nil {
		return s
	}
	from, ok := r.net.member(src)
	if !ok {
		r.unknown.Add(1)
		return nil
	}
	target := r.target.Load()
	if target == nil {
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(*target))
	if err != nil {
		return nil
	}
	_ = up.SetReadBuffer(relaySocketBuf)
	_ = up.SetWriteBuffer(relaySocketBuf)
	s = &relaySession{r: r, from: from, src: src, upstream: up}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.sessions) >= maxRelaySession || r.sessions[src] != nil {
		up.Close()
		return r.sessions[src]
	}
	r.sessions[src] = s
	r.wg.Add(1)
	go s.readUpstream()
	return s
}

// toMember writes a packet that crossed the link to the member.
func (s *relaySession) toMember(b []byte) { _, _ = s.upstream.Write(b) }

// toSender writes a packet that crossed the link back to the sender.
func (s *relaySession) toSender(b []byte) { _, _ = s.r.conn.WriteToUDPAddrPort(b, s.src) }

// readUpstream carries the member's replies back to the sender.
func (s *relaySession) readUpstream() {
	defer s.r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := s.upstream.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		data := append([]byte(nil), buf[:n]...)
		s.r.net.send(s.r.member, s.from, data, s.toSender)
	}
}

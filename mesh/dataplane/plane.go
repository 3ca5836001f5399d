package dataplane

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	crypto_pb "github.com/libp2p/go-libp2p/core/crypto/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	p2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// ALPN is the TLS application protocol of the QUIC tensor data plane.
const ALPN = "meshnode-tensor/1"

// Data-plane errors that callers branch on.
var (
	// ErrClosed is returned by every call after Close, and wakes waiting Recvs.
	ErrClosed = errors.New("data plane closed")
	// ErrNoPeerAddr is returned by Send to a peer whose address was never set.
	ErrNoPeerAddr = errors.New("data plane: no address for peer")
	// ErrPeerIdentity is returned when a peer's TLS identity is not the expected peer ID.
	ErrPeerIdentity = errors.New("data plane: peer identity mismatch")
)

// Plane moves tensor frames between nodes over QUIC, on its own UDP port, with TLS
// bound to the nodes' libp2p identities (ALPN ALPN). It satisfies the engine's
// Transport interface (Self, Send, Recv).
//
// Each pair of nodes shares one connection, dialled lazily by the first Send in either
// direction (if both dial at once both connections stay in use; frames are attributed to
// the authenticated peer whichever carries them). On a connection each frame kind has its
// own unidirectional stream, written one frame at a time. Every incoming frame is bounded
// by MaxPayload before allocation; a malformed frame resets its stream with a FrameReset*
// code and is counted; a peer that floods the mailbox past MailboxBytes is disconnected.
type Plane struct {
	cfg        Config
	log        *slog.Logger
	self       peer.ID
	selfID     string
	ident      *p2ptls.Identity
	udp        net.PacketConn
	tr         *quic.Transport
	ln         *quic.Listener
	qconf      *quic.Config
	maxPayload int
	box        *frame.Mailbox
	inflight   *budget // budget.go
	stats      counters
	hs         handshakes // handshakes.go
	probes     probeState // dataplane_probe.go

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the data plane started

	mu     sync.Mutex
	closed bool
	addrs  map[string]string    // peer ID → UDP host:port
	peers  map[string]*sendPeer // peer ID → the connection Send uses
	conns  map[*peerConn]struct{}
	routes map[string]*streamPeer      // streams.go: peers reached over libp2p streams
	p2p    map[network.Stream]struct{} // streams.go: open libp2p streams, reset by Close
}

// sendPeer is the data plane's view of one peer: the connection frames go out on, a
// channel closed when a dial in progress ends, and every open connection with the peer,
// oldest first (at most MaxConnsPerPeer).
type sendPeer struct {
	conn    *peerConn
	dialing chan struct{}
	open    []*peerConn
}

// sendConn returns the connection frames go out on: the current one while it is alive,
// else the newest other open connection that is (one the peer dialled: behind a NAT the
// peer may be reachable no other way), which becomes the current one; nil when none is.
// Called with Plane.mu held.
func (p *sendPeer) sendConn() *peerConn {
	if p.conn != nil && p.conn.alive() {
		return p.conn
	}
	p.conn = nil
	for i := len(p.open) - 1; i >= 0; i-- {
		if p.open[i].alive() {
			p.conn = p.open[i]
			return p.conn
		}
	}
	return nil
}

// peerConn is one authenticated QUIC connection and its outgoing streams, one per kind.
type peerConn struct {
	qc   *quic.Conn
	peer string    // the verified remote peer ID
	path string    // PathDirect (this node dialled) or PathInbound (the peer did)
	at   time.Time // when it was adopted (DropConnsBefore)

	mu      sync.Mutex
	streams map[frame.Kind]*kindStream
	// recent are copies of the small frames written on the connection lately, sent again
	// if it ends in a stateless reset (resend.go); recentBytes is their payload. drained
	// says the connection ended and recent was taken: a frame written since went nowhere.
	recent      []sentFrame
	recentBytes int
	drained     bool
	// written counts the frames written on the connection (tests ask which connection a
	// frame went out on).
	written atomic.Int64
}

func (c *peerConn) alive() bool { return c.qc.Context().Err() == nil }

// New listens on cfg.ListenAddr and serves incoming connections until Close. ctx
// bounds the setup only.
func New(ctx context.Context, cfg Config) (*Plane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	self, err := peer.IDFromPrivateKey(cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("data plane: peer ID of identity: %w", err)
	}
	ident, err := p2ptls.NewIdentity(cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("data plane: TLS identity: %w", err)
	}
	resetKey, err := statelessResetKey(cfg.Identity) // reset.go: a restarted node is heard at once
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	udp, err := lc.ListenPacket(ctx, "udp", cfg.listenAddr())
	if err != nil {
		return nil, fmt.Errorf("data plane: %w", err) // "listen udp ADDR: …" names the address
	}
	d := &Plane{
		cfg: cfg, self: self, selfID: self.String(), ident: ident, udp: udp,
		tr: &quic.Transport{Conn: udp, StatelessResetKey: resetKey}, qconf: cfg.quicConfig(), maxPayload: cfg.maxPayload(),
		box: frame.NewBoundedMailbox(cfg.mailboxBytes(), cfg.mailboxFrames()), inflight: newBudget(cfg.maxInFlight()),
		addrs: map[string]string{}, peers: map[string]*sendPeer{}, conns: map[*peerConn]struct{}{},
		routes: map[string]*streamPeer{}, p2p: map[network.Stream]struct{}{},
	}
	d.log = cfg.logger().With("component", "dataplane", "self", d.selfID, "addr", udp.LocalAddr().String())
	d.stats.init()
	d.hs.max = cfg.maxHandshakes()
	d.tr.ConnContext = d.connContext
	d.ln, err = d.tr.Listen(d.serverTLS(), cfg.serverQUICConfig(d.qconf))
	if err != nil {
		d.tr.Close()
		udp.Close()
		return nil, fmt.Errorf("data plane: QUIC listener on %s: %w", udp.LocalAddr(), err)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.wg.Add(1)
	go d.acceptLoop()
	if cfg.RunsJob != nil {
		d.wg.Add(1)
		go d.expireLoop()
	}
	return d, nil
}

// Self is this node's peer ID (peer.ID.String()).
func (d *Plane) Self() string { return d.selfID }

// SigningKey is this node's libp2p key as the standard library holds an Ed25519 key: the
// training workers on the data plane sign their contributions with it
// (parallel.SigningTransport), and every member recovers the public key from the node's
// ID. nil when the identity is not an Ed25519 key (nothing is signed then).
func (d *Plane) SigningKey() ed25519.PrivateKey {
	if d.cfg.Identity == nil || d.cfg.Identity.Type() != crypto_pb.KeyType_Ed25519 {
		return nil
	}
	raw, err := d.cfg.Identity.Raw()
	if err != nil || len(raw) != ed25519.PrivateKeySize {
		return nil
	}
	return ed25519.PrivateKey(raw)
}

// Addr is the UDP host:port the data plane listens on, as bound (an unspecified host
// stays unspecified: announce it with the node's reachable IP).
func (d *Plane) Addr() string { return d.udp.LocalAddr().String() }

// SetPeerAddr records where peer peerID's data plane listens (UDP host:port). It is used
// by the next dial; an existing connection is kept.
//
// When the address changes (the peer restarted elsewhere), the connection this node sends
// on is closed, so that the next Send dials the new address instead of writing into a
// connection to a process that may be gone.
func (d *Plane) SetPeerAddr(peerID, addr string) {
	d.mu.Lock()
	old, known := d.addrs[peerID]
	d.addrs[peerID] = addr
	var stale *peerConn
	if p := d.peers[peerID]; known && old != addr && p != nil {
		stale, p.conn = p.conn, nil
	}
	d.mu.Unlock()
	if stale != nil {
		stale.qc.CloseWithError(ConnMoved, "peer moved to "+addr)
	}
}

// Send writes f to peer `to` on the stream of f's kind, dialling the peer first if no
// connection is open. It returns once the frame is handed to QUIC (flow control may make
// it wait), not when the peer has read it. A failed Send is not retried: the frame may or
// may not have arrived. A small frame that went into a connection to a peer's process
// that has since restarted is sent again to the new one (resend.go). Frames of one kind
// to one peer arrive in the order sent, except such a resent frame.
func (d *Plane) Send(ctx context.Context, to string, f *frame.Frame) error {
	if len(f.Payload) > d.maxPayload {
		return fmt.Errorf("data plane: send to %s: %w: %d-byte payload, bound %d", to, frame.ErrTooBig, len(f.Payload), d.maxPayload)
	}
	hdr, err := frame.AppendHeader(make([]byte, 0, frame.HeaderSize), f)
	if err != nil {
		return fmt.Errorf("data plane: encode frame for %s: %w", to, err)
	}
	if sp := d.streamRoute(to); sp != nil {
		return d.sendOverStream(ctx, to, sp, f, hdr) // streams.go: no QUIC path to this peer
	}
	for attempt := 0; ; attempt++ {
		c, err := d.connTo(ctx, to)
		if err != nil {
			return err
		}
		kept := c.remember(f)
		if err := c.sendStream(f.Kind).write(ctx, c.qc, hdr, f.Payload); err != nil {
			if held := c.forget(f); !held && kept && len(f.Payload) <= resendMaxFrame && c.swallowedAll(ctx) {
				// c ended in a stateless reset while f was written, and its resend took f
				// (resendAfterReset): f goes to the peer's new process from there.
				return nil
			}
			return fmt.Errorf("data plane: send kind-%d frame to %s: %w", f.Kind, to, err)
		}
		c.written.Add(1)
		d.stats.count(dirSent, to, c.path, f)
		if kept || attempt > 0 {
			return nil
		}
		// c ended, and what it swallowed was sent again (resendAfterReset), between connTo
		// handing it out and this write, which QUIC still took: f went nowhere. c is out of
		// the peer's connections by then (serveConn forgets it first), so this sends f on
		// the next one. Seen under -race: the restarted peer's frame was lost.
		d.stats.resent(to)
	}
}

// Recv waits for the next frame from peer `from` with key k, whatever order frames
// arrived in. It returns ErrClosed after Close, or ctx's error.
func (d *Plane) Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error) {
	return d.box.Receive(ctx, from, k)
}

// Purge drops the frames waiting for job at epochs up to throughEpoch, and those that
// arrive for them later (frame.Mailbox.Purge); waiting Recvs for them return
// frame.ErrPurged. The engine calls it when it replans (the old epoch), cancels or finishes
// a job (its current epoch), so that stale frames stop counting against their senders'
// MailboxBytes. It returns the number of frames dropped.
func (d *Plane) Purge(job uint64, throughEpoch uint32) int { return d.box.Purge(job, throughEpoch) }

// Close closes every connection and the listener, wakes waiting Recvs with
// ErrClosed and returns when every goroutine of the data plane has ended.
func (d *Plane) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	conns := make([]*peerConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	streams := make([]network.Stream, 0, len(d.p2p))
	for s := range d.p2p {
		streams = append(streams, s)
	}
	d.mu.Unlock()
	for _, s := range streams {
		_ = s.Reset() // wakes the readers of ServeStream
	}

	d.cancel()
	d.box.Close(ErrClosed)
	lnErr := d.ln.Close()
	for _, c := range conns {
		c.qc.CloseWithError(ConnShutdown, "data plane closed")
	}
	trErr := d.tr.Close()
	udpErr := d.udp.Close()
	d.wg.Wait()
	return errors.Join(lnErr, trErr, udpErr)
}

// serverTLS verifies every client's certificate chain as libp2p does (a fresh
// ConfigForPeer("") per handshake) and fails the handshake of a peer AllowPeer refuses;
// acceptLoop then reads the verified peer ID from the connection state.
func (d *Plane) serverTLS() *tls.Config {
	return &tls.Config{
		NextProtos: []string{ALPN},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			conf, keyCh := d.ident.ConfigForPeer("")
			conf.NextProtos = []string{ALPN}
			if d.cfg.AllowPeer != nil {
				verify := conf.VerifyPeerCertificate
				conf.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
					if err := verify(raw, chains); err != nil {
						return err
					}
					return d.checkAllowed(<-keyCh) // verify sent the key before returning nil
				}
			}
			return conf, nil
		},
	}
}

func (d *Plane) checkAllowed(pub crypto.PubKey) error {
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		return err
	}
	if !d.cfg.AllowPeer(id.String()) {
		d.log.Warn("refused peer not allowed", "peer", id)
		return fmt.Errorf("peer %s is not allowed on this data plane", id)
	}
	return nil
}

// remotePeerID is the peer ID proven by the connection's TLS certificate chain.
func remotePeerID(qc *quic.Conn) (peer.ID, error) {
	st := qc.ConnectionState().TLS
	if st.NegotiatedProtocol != ALPN {
		return "", fmt.Errorf("%w: ALPN %q, want %q", ErrPeerIdentity, st.NegotiatedProtocol, ALPN)
	}
	pub, err := p2ptls.PubKeyFromCertChain(st.PeerCertificates)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrPeerIdentity, err)
	}
	return peer.IDFromPublicKey(pub)
}

func (d *Plane) acceptLoop() {
	defer d.wg.Done()
	for {
		qc, err := d.ln.Accept(d.ctx)
		if err != nil {
			return // listener closed
		}
		handshakeDone(qc)
		remote, err := remotePeerID(qc)
		if err != nil {
			d.log.Warn("refused connection", "remote", qc.RemoteAddr(), "err", err)
			qc.CloseWithError(ConnBadIdentity, "bad identity")
			continue
		}
		if d.cfg.AllowPeer != nil && !d.cfg.AllowPeer(remote.String()) {
			d.log.Warn("refused peer not allowed", "peer", remote, "remote", qc.RemoteAddr())
			qc.CloseWithError(ConnNotAllowed, "peer not allowed")
			continue
		}
		d.log.Debug("accepted connection", "peer", remote, "remote", qc.RemoteAddr())
		d.adopt(qc, remote.String(), PathInbound)
	}
}

// connTo returns the connection frames to `to` go out on, dialling when there is none. One
// dial per peer runs at a time; concurrent senders wait for it.
func (d *Plane) connTo(ctx context.Context, to string) (*peerConn, error) {
	d.mu.Lock()
	p := d.peers[to]
	if p == nil {
		p = &sendPeer{}
		d.peers[to] = p
	}
	for {
		if d.closed {
			d.mu.Unlock()
			return nil, ErrClosed
		}
		if c := p.sendConn(); c != nil {
			d.mu.Unlock()
			return c, nil
		}
		if p.dialing == nil {
			break
		}
		wait := p.dialing
		d.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		d.mu.Lock()
	}
	addr, ok := d.addrs[to]
	if !ok {
		d.mu.Unlock()
		return nil, fmt.Errorf("%w %s: set it with SetPeerAddr", ErrNoPeerAddr, to)
	}
	done := make(chan struct{})
	p.dialing = done
	d.mu.Unlock()

	c, err := d.dial(ctx, to, addr)
	d.mu.Lock()
	p.dialing = nil
	d.mu.Unlock()
	close(done)
	return c, err
}

// dial connects to peer `to` at addr and adopts the connection.
func (d *Plane) dial(ctx context.Context, to, addr string) (*peerConn, error) {
	qc, err := d.handshake(ctx, to, addr)
	if err != nil {
		return nil, err
	}
	d.log.Debug("dialled", "peer", to, "remote", addr)
	return d.adopt(qc, to, PathDirect)
}

// handshake opens a QUIC connection to peer `to` at addr, bounded by DialTimeout on top of
// ctx. The TLS configuration from ConfigForPeer fails the handshake unless the server's
// certificate is bound to `to`.
func (d *Plane) handshake(ctx context.Context, to, addr string) (*quic.Conn, error) {
	pid, err := peer.Decode(to)
	if err != nil {
		return nil, fmt.Errorf("data plane: %q is not a peer ID: %w", to, err)
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("data plane: address of %s: %w", to, err)
	}
	tlsConf, _ := d.ident.ConfigForPeer(pid)
	tlsConf.NextProtos = []string{ALPN}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.dialTimeout())
	defer cancel()
	qc, err := d.tr.Dial(ctx, ua, tlsConf, d.qconf)
	if err != nil {
		return nil, fmt.Errorf("data plane: dial %s at %s: %w", to, addr, err)
	}
	got, err := remotePeerID(qc)
	if err == nil && got != pid {
		err = fmt.Errorf("%w: dialled %s, certificate of %s", ErrPeerIdentity, pid, got)
	}
	if err != nil {
		qc.CloseWithError(ConnBadIdentity, "bad identity")
		return nil, fmt.Errorf("data plane: dial %s at %s: %w", to, addr, err)
	}
	return qc, nil
}

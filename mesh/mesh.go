package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	yamux "github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// Mesh is one node's membership in a mesh: its libp2p host, admission, discovery,
// heartbeats, peer table and probes. Create it with New, run it with Start, stop it with
// Close. All methods are safe for concurrent use.
type Mesh struct {
	cfg   Config
	log   *slog.Logger
	host  host.Host
	ah    admittedHost
	gater *gater
	adm   *admission
	table *peerTable

	ps    *pubsub.PubSub
	topic *pubsub.Topic
	kad   *dht.IpfsDHT
	mdns  mdns.Service

	relaySvc     *relay.Relay  // relay.go: the circuit relay service, nil without NAT
	relays       relayState    // relay.go: reservations this node holds
	punches      punches       // relay.go: members hole punching reached
	relayRefused atomic.Uint64 // relay.go: reservations and circuits the ACL refused

	profile  atomic.Pointer[Profile]
	observed observations // observed.go: where peers see this host
	seq      atomic.Uint64
	probeQ   chan peer.ID

	malformedCount atomic.Uint64
	// unadmittedSigners counts heartbeats dropped for a signer not admitted here.
	unadmittedSigners atomic.Uint64
	dialMu            sync.Mutex
	lastDial          map[peer.ID]time.Time
	lastSignerDial    time.Time // gossip.go: dials of heartbeat signers not yet admitted

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	started   atomic.Bool
	closeOnce sync.Once
	leaving   atomic.Bool
	noLeave   bool // tests: Close without announcing, as a crash would
}

// leaveLinger is how long Close waits after announcing that the node leaves.
const leaveLinger = 200 * time.Millisecond

// New validates cfg, creates the host (listening at once) and the admission machinery.
// Nothing is dialled and no heartbeat is sent before Start.
func New(cfg Config) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Mesh{
		cfg: cfg, log: log.With("component", "mesh"),
		gater:    newGater(cfg.AllowPeers, cfg.BanDuration),
		table:    newPeerTable(cfg.suspectAfter(), cfg.deadAfter(), cfg.forgetAfter()),
		probeQ:   make(chan peer.ID, 256),
		lastDial: map[peer.ID]time.Time{},
	}
	m.punches.notify = cfg.OnHolePunched
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.seq.Store(uint64(time.Now().UnixNano()))
	h, err := libp2p.New(m.hostOptions()...)
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("start libp2p host: %w", err)
	}
	m.host = h
	// Before anything can connect (the DHT dials its bootstrap peers as soon as it exists,
	// the node may take seconds before Start): an identify missed here is an observed
	// address lost until that connection is replaced, and a NATed node would not know it
	// is behind a NAT (relay.go).
	m.startObserving() // observed.go
	m.adm = newAdmission(m.ctx, h, m.gater, cfg, m.log)
	m.ah = admittedHost{Host: h, a: m.adm}
	m.adm.start()
	m.ah.SetStreamHandler(ProtocolProbe, m.handleProbe)
	if cfg.NAT {
		if err := m.startRelay(); err != nil { // relay.go: after admission, which its ACL asks
			m.Close()
			return nil, err
		}
	}
	if err := m.startPubsub(); err != nil {
		m.Close()
		return nil, err
	}
	if cfg.DHT {
		if m.kad, err = dht.New(m.ctx, m.ah, dht.Mode(dht.ModeServer), dht.ProtocolPrefix(dhtPrefix),
			dht.BootstrapPeers(cfg.Bootstrap...), dht.DisableValues()); err != nil {
			m.Close()
			return nil, fmt.Errorf("start DHT: %w", err)
		}
	}
	return m, nil
}

func (m *Mesh) hostOptions() []libp2p.Option {
	listen := m.cfg.ListenAddrs
	if len(listen) == 0 {
		listen = DefaultListenAddrs(DefaultPort)
	}
	opts := []libp2p.Option{
		libp2p.Identity(m.cfg.Identity),
		libp2p.ListenAddrs(listen...),
		libp2p.Transport(quic.NewTransport),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ConnectionGater(m.gater),
		libp2p.UserAgent("meshnode"),
	}
	if m.cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(m.cfg.Registerer))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	if m.cfg.NAT {
		opts = append(opts,
			libp2p.NATPortMap(),
			libp2p.EnableNATService(),
			libp2p.EnableAutoNATv2(),
			libp2p.EnableHolePunching(holepunch.WithTracer(&m.punches)),
			libp2p.EnableAutoRelayWithPeerSource(m.relayCandidates),
		)
	}
	return opts
}

// Start begins discovery, heartbeats and probes. ctx bounds only the start itself.
func (m *Mesh) Start(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("mesh: already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.cfg.MDNS {
		m.mdns = mdns.NewMdnsService(m.host, "_meshnode-"+m.cfg.meshName()+"._udp", mdnsNotifee{m})
		if err := m.mdns.Start(); err != nil {
			m.log.Warn("mDNS discovery unavailable", "err", err)
			m.mdns = nil
		}
	}
	m.watchRestarts() // restart.go
	m.goLoop(m.heartbeatLoop)
	m.goLoop(m.receiveLoop)
	m.goLoop(m.discoveryLoop)
	m.goLoop(m.probeLoop)
	if m.cfg.NAT {
		m.goLoop(m.relayLoop) // relay.go
	}
	m.log.Info("mesh started", "id", m.host.ID(), "mesh", m.cfg.meshName(), "addrs", m.host.Addrs())
	return nil
}

func (m *Mesh) goLoop(f func(context.Context)) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f(m.ctx)
	}()
}

// Close announces that this node is leaving (best effort), stops every loop and closes
// the host. It is safe to call more than once.
func (m *Mesh) Close() error {
	var err error
	m.closeOnce.Do(func() {
		if m.started.Load() && m.topic != nil && !m.noLeave {
			// gossipsub has no delivery ack: give the queued message a moment on the
			// wire before the connections close.
			m.leaving.Store(true) // no regular heartbeat may follow the announcement
			m.publishHeartbeat(true)
			time.Sleep(leaveLinger)
		}
		m.cancel()
		if m.mdns != nil {
			_ = m.mdns.Close()
		}
		m.wg.Wait()
		if m.kad != nil {
			_ = m.kad.Close()
		}
		if m.topic != nil {
			_ = m.topic.Close()
		}
		if m.relaySvc != nil {
			_ = m.relaySvc.Close()
		}
		if m.host != nil {
			err = m.host.Close()
		}
	})
	return err
}

// ID is this node's peer ID.
func (m *Mesh) ID() peer.ID { return m.host.ID() }

// Addrs returns the addresses other nodes can dial, each ending in /p2p/<id>, ready to
// be used as a --bootstrap value.
func (m *Mesh) Addrs() []ma.Multiaddr {
	suffix := ma.StringCast("/p2p/" + m.host.ID().String())
	var out []ma.Multiaddr
	for _, a := range m.host.Addrs() {
		out = append(out, a.Encapsulate(suffix))
	}
	return out
}

// Host returns the host as mesh services should use it: stream handlers it registers
// serve admitted peers only and NewStream waits for the remote's admission.
func (m *Mesh) Host() host.Host { return m.ah }

// Handle serves protocol pid to admitted peers; streams from any other peer are reset
// before handler sees them. Use it for every meshnode protocol (raft, rpc, blob).
func (m *Mesh) Handle(pid protocol.ID, handler network.StreamHandler) {
	m.ah.SetStreamHandler(pid, handler)
}

// NewStream opens a pid stream to an admitted peer, dialling and waiting for its
// admission when needed. It fails with ErrNotAdmitted if p is refused.
func (m *Mesh) NewStream(ctx context.Context, p peer.ID, pid protocol.ID) (network.Stream, error) {
	return m.ah.NewStream(ctx, p, pid)
}

// IsAdmitted reports whether p is connected and has proved knowledge of the join secret.
func (m *Mesh) IsAdmitted(p peer.ID) bool { return m.adm.isAdmitted(p) }

// SetProfile replaces the profile announced in heartbeats from the next one on.
func (m *Mesh) SetProfile(p Profile) { m.profile.Store(p.Clone()) }

// Profile returns the announced profile, nil before the first SetProfile.
func (m *Mesh) Profile() *Profile { return m.profile.Load().Clone() }

// Peers returns the peer table (every other member heard from), sorted by ID.
func (m *Mesh) Peers() []PeerInfo { return m.table.snapshot() }

// Stats counts admission and protocol failures since start.
type Stats struct {
	// AuthFailures counts peers refused admission (wrong secret, malformed, silent
	// through every attempt).
	AuthFailures uint64
	// AuthRetries counts auth attempts started again because the previous one timed out.
	AuthRetries uint64
	// AuthCrowded counts inbound connections closed at once because Config.MaxPendingAuth
	// peers were authenticating.
	AuthCrowded uint64
	// RefusedStreams counts streams reset because their peer was not admitted.
	RefusedStreams uint64
	// Malformed counts malformed messages from admitted peers (each disconnects the peer).
	Malformed uint64
	// UnadmittedSigners counts heartbeats dropped because this node had not admitted their
	// signer itself (relayed for a key nobody here proved the secret for).
	UnadmittedSigners uint64
	// Connected is the number of peers with an open connection, admitted or not.
	Connected int
	// Admitted is the number of connected, admitted peers.
	Admitted int
	// RelayRefused counts relay reservations and circuits refused because an end was not
	// an admitted member.
	RelayRefused uint64
	// Reservations is the number of relay reservations this node holds.
	Reservations int
}

// Stats returns the current counters.
func (m *Mesh) Stats() Stats {
	return Stats{
		AuthFailures: m.adm.failures.Load(), AuthRetries: m.adm.retries.Load(), AuthCrowded: m.adm.crowded.Load(), RefusedStreams: m.adm.refused.Load(),
		Malformed: m.malformedCount.Load(), UnadmittedSigners: m.unadmittedSigners.Load(), Connected: len(m.host.Network().Peers()),
		Admitted: len(m.adm.admitted()), RelayRefused: m.relayRefused.Load(), Reservations: len(m.RelayAddrs()),
	}
}

// Disconnect closes every connection with p, which broke a protocol this node serves beside
// the mesh's own (the data plane's frames: dataplane.Config.Disconnect), counted in
// Stats.Malformed and logged with what it broke, exactly as a malformed mesh message is.
// p stays admitted and may connect again.
func (m *Mesh) Disconnect(p peer.ID, what string, err error) { m.malformed(p, what, err) }

// malformed logs a malformed message from p and disconnects it.
func (m *Mesh) malformed(p peer.ID, what string, err error) {
	m.malformedCount.Add(1)
	m.log.Warn("malformed message, disconnecting peer", "peer", p, "what", what, "err", err)
	_ = m.host.Network().ClosePeer(p)
}

// relayCandidates offers admitted mesh members to auto-relay as relay candidates.
func (m *Mesh) relayCandidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	ch := make(chan peer.AddrInfo, num)
	defer close(ch)
	if m.adm == nil {
		return ch
	}
	for _, p := range m.adm.admitted() {
		if len(ch) == num {
			break
		}
		ch <- peer.AddrInfo{ID: p, Addrs: m.host.Peerstore().Addrs(p)}
	}
	return ch
}

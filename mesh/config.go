package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultPort is the TCP and UDP port a node listens on unless told otherwise.
const DefaultPort = 4242

// MinSecretLen is the shortest join secret accepted. `meshnode init` makes 43 characters
// (256 random bits); a short secret could be guessed offline from one auth exchange.
const MinSecretLen = 16

var meshNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// ValidateMeshName checks that name can name a mesh: 1-40 lower-case letters, digits or
// '-', starting with a letter or digit (it becomes part of a DNS-SD service name).
func ValidateMeshName(name string) error {
	if !meshNameRE.MatchString(name) {
		return fmt.Errorf("mesh name %q: use 1-40 lower-case letters, digits or '-', starting with a letter or digit", name)
	}
	return nil
}

// Config holds everything a Mesh needs. Build one with DefaultConfig and set Identity and
// JoinSecret (or AllowPeers).
type Config struct {
	// Identity is the node's private key; its peer ID is the node's ID. Required.
	Identity crypto.PrivKey
	// Mesh names the mesh: lower-case letters, digits and '-', at most 40 characters. It
	// names the heartbeat topic, the DHT rendezvous and the mDNS service, and is bound into
	// every auth exchange. Empty means "default".
	Mesh string
	// JoinSecret is the shared secret every member proves it knows. Empty is allowed only
	// with a non-empty AllowPeers; then admission rests on the allowlist alone.
	JoinSecret string
	// AllowPeers, when non-empty, is the only set of peers admitted (in addition to
	// knowing the secret). Empty admits any peer that knows the secret.
	AllowPeers []peer.ID
	// ListenAddrs are the multiaddrs to listen on. Empty means QUIC-v1 and TCP on
	// DefaultPort on all IPv4 and IPv6 interfaces.
	ListenAddrs []ma.Multiaddr
	// Bootstrap lists peers (multiaddrs ending in /p2p/<id>) to connect to at start and to
	// retry while not connected. Empty is fine for the first node of a mesh.
	Bootstrap []peer.AddrInfo
	// MDNS enables discovery on the local network. Off in the zero value; DefaultConfig
	// turns it on.
	MDNS bool
	// DHT enables Kademlia rendezvous on the mesh name. DefaultConfig turns it on.
	DHT bool
	// NAT enables UPnP/NAT-PMP port mapping, AutoNAT, hole punching, the relay v2 service
	// and auto-relay through mesh members. DefaultConfig turns it on.
	NAT bool

	// HeartbeatInterval is how often a heartbeat is published. Zero means 2 s.
	HeartbeatInterval time.Duration
	// SuspectAfter is the heartbeat age after which a peer is suspect. Zero means
	// 3 × HeartbeatInterval.
	SuspectAfter time.Duration
	// DeadAfter is the heartbeat age after which a peer is dead. Zero means
	// 5 × HeartbeatInterval.
	DeadAfter time.Duration
	// ForgetAfter is the heartbeat age after which a dead peer is removed from the table.
	// Zero means 1 h.
	ForgetAfter time.Duration
	// AuthTimeout bounds the first auth exchange after a connection opens. A peer that
	// has not authenticated by then (a slow link, a loaded machine) gets authAttempts
	// attempts in all, each twice as long as the one before, all within AuthWindow; a peer
	// silent through them is disconnected and refused for a short hold-off
	// (8 × AuthTimeout), not banned. Zero means 5 s.
	AuthTimeout time.Duration
	// AuthWindow bounds the whole admission of a connected peer: the attempts stop at
	// its end, and a peer not admitted by then is disconnected. Zero means 10 s.
	AuthWindow time.Duration
	// MaxPendingAuth bounds the peers connected to this node and not yet admitted through
	// inbound connections; one more is disconnected at once (not banned). Zero means 64.
	MaxPendingAuth int
	// BanDuration is how long a peer that sent a wrong proof (or broke the auth protocol)
	// is refused. Zero means 1 h.
	BanDuration time.Duration
	// DiscoveryInterval is how often bootstrap peers are retried and the DHT rendezvous is
	// queried. Zero means 30 s.
	DiscoveryInterval time.Duration

	// Probe configures link probes.
	Probe ProbeConfig
	// Relay bounds the circuit relay service this node runs for other members (with NAT
	// on). The zero value holds the documented defaults (relay.go).
	Relay RelayConfig

	// OnHolePunched, when set, is called (on a goroutine of its own) each time hole
	// punching opened a direct connection to a peer that was reached through a relay. Nil:
	// nothing is told.
	OnHolePunched func(peer.ID)

	// OnRestarted, when set, is called (on a goroutine of the connection's notification)
	// when a member held dead connects again: it restarted, and whatever connected to it
	// before `dead` (when it was held dead) leads to its old process. Called once per new
	// connection while the member is still held dead. Nil: nothing is told.
	OnRestarted func(p peer.ID, dead time.Time)

	// Logger receives the mesh's logs. Nil discards them.
	Logger *slog.Logger
	// Registerer, when set, receives go-libp2p's metrics. Nil disables them.
	Registerer prometheus.Registerer
}

// ProbeConfig configures the link probes run against every peer.
type ProbeConfig struct {
	// Interval is how often every live peer is probed again. Zero means 5 min; a negative
	// value probes on join only.
	Interval time.Duration
	// Pings is how many round trips make one RTT measurement (the median is kept). Zero
	// means 5.
	Pings int
	// MinBytes is the size of the first bandwidth transfer. Zero means 64 KiB.
	MinBytes int
	// MaxBytes caps one bandwidth transfer; the probe doubles its size until a transfer
	// takes Target or reaches MaxBytes. Zero means 32 MiB; at most MaxProbeBytes.
	MaxBytes int
	// Target is the transfer duration the probe grows towards. Zero means 250 ms.
	Target time.Duration
	// Timeout bounds one whole probe of one peer. Zero means 30 s.
	Timeout time.Duration
}

// DefaultConfig returns a configuration with discovery and NAT traversal on and the
// documented default timings. Identity and JoinSecret still have to be set.
func DefaultConfig() Config {
	return Config{
		Mesh: "default", MDNS: true, DHT: true, NAT: true,
		HeartbeatInterval: 2 * time.Second,
		AuthTimeout:       5 * time.Second,
		DiscoveryInterval: 30 * time.Second,
	}
}

// Validate reports the first problem with c in words a user can act on.
func (c Config) Validate() error {
	if c.Identity == nil {
		return errors.New("mesh: no identity key")
	}
	if c.Mesh != "" {
		if err := ValidateMeshName(c.Mesh); err != nil {
			return err
		}
	}
	if c.JoinSecret == "" && len(c.AllowPeers) == 0 {
		return errors.New("no join secret: pass --join-secret (or MESHNODE_JOIN_SECRET) as printed by `meshnode init`, or --allow peer IDs")
	}
	if c.JoinSecret != "" && len(c.JoinSecret) < MinSecretLen {
		return fmt.Errorf("join secret is %d characters: use at least %d (`meshnode init` makes one)", len(c.JoinSecret), MinSecretLen)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"heartbeat interval", c.HeartbeatInterval}, {"suspect-after", c.SuspectAfter}, {"dead-after", c.DeadAfter},
		{"forget-after", c.ForgetAfter}, {"auth timeout", c.AuthTimeout}, {"auth window", c.AuthWindow}, {"ban duration", c.BanDuration},
		{"discovery interval", c.DiscoveryInterval}} {
		if d.v < 0 {
			return fmt.Errorf("%s must be ≥ 0 (got %s)", d.name, d.v)
		}
	}
	if c.MaxPendingAuth < 0 {
		return fmt.Errorf("max pending auth must be ≥ 0 (got %d)", c.MaxPendingAuth)
	}
	if s, d := c.suspectAfter(), c.deadAfter(); d <= s {
		return fmt.Errorf("dead-after (%s) must be longer than suspect-after (%s)", d, s)
	}
	if c.suspectAfter() <= c.heartbeatInterval() {
		return fmt.Errorf("suspect-after (%s) must be longer than the heartbeat interval (%s)", c.suspectAfter(), c.heartbeatInterval())
	}
	if err := c.Relay.validate(); err != nil {
		return err
	}
	return c.Probe.validate()
}

func (p ProbeConfig) validate() error {
	if p.Pings < 0 || p.MinBytes < 0 || p.MaxBytes < 0 || p.Target < 0 || p.Timeout < 0 {
		return errors.New("probe settings must be ≥ 0")
	}
	if p.maxBytes() > MaxProbeBytes {
		return fmt.Errorf("probe max bytes %d exceeds the protocol limit %d", p.maxBytes(), MaxProbeBytes)
	}
	if p.minBytes() > p.maxBytes() {
		return fmt.Errorf("probe min bytes %d exceeds max bytes %d", p.minBytes(), p.maxBytes())
	}
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (c Config) meshName() string { return orDefault(c.Mesh, "default") }
func (c Config) heartbeatInterval() time.Duration {
	return orDefault(c.HeartbeatInterval, 2*time.Second)
}
func (c Config) suspectAfter() time.Duration {
	return orDefault(c.SuspectAfter, 3*c.heartbeatInterval())
}
func (c Config) deadAfter() time.Duration   { return orDefault(c.DeadAfter, 5*c.heartbeatInterval()) }
func (c Config) forgetAfter() time.Duration { return orDefault(c.ForgetAfter, time.Hour) }
func (c Config) authTimeout() time.Duration { return orDefault(c.AuthTimeout, 5*time.Second) }
func (c Config) authWindow() time.Duration  { return orDefault(c.AuthWindow, 10*time.Second) }
func (c Config) maxPendingAuth() int        { return orDefault(c.MaxPendingAuth, 64) }
func (c Config) discoveryInterval() time.Duration {
	return orDefault(c.DiscoveryInterval, 30*time.Second)
}

func (p ProbeConfig) interval() time.Duration { return orDefault(p.Interval, 5*time.Minute) }
func (p ProbeConfig) pings() int              { return orDefault(p.Pings, 5) }
func (p ProbeConfig) minBytes() int           { return orDefault(p.MinBytes, 64<<10) }
func (p ProbeConfig) maxBytes() int           { return orDefault(p.MaxBytes, 32<<20) }
func (p ProbeConfig) target() time.Duration   { return orDefault(p.Target, 250*time.Millisecond) }
func (p ProbeConfig) timeout() time.Duration  { return orDefault(p.Timeout, 30*time.Second) }

// DefaultListenAddrs are the addresses a node listens on when none are given: QUIC-v1 and
// TCP on port, IPv4 and IPv6.
func DefaultListenAddrs(port int) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, s := range []string{
		"/ip4/0.0.0.0/udp/%d/quic-v1", "/ip4/0.0.0.0/tcp/%d",
		"/ip6/::/udp/%d/quic-v1", "/ip6/::/tcp/%d",
	} {
		out = append(out, ma.StringCast(fmt.Sprintf(s, port)))
	}
	return out
}

// ParseBootstrap parses multiaddrs that end in /p2p/<peer-id> into peer infos, merging
// addresses of the same peer.
func ParseBootstrap(addrs []string) ([]peer.AddrInfo, error) {
	var mas []ma.Multiaddr
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("bootstrap address %q: %w", s, err)
		}
		if _, err := a.ValueForProtocol(ma.P_P2P); err != nil {
			return nil, fmt.Errorf("bootstrap address %q: must end in /p2p/<peer-id> (`meshnode status` on that node prints full addresses)", s)
		}
		mas = append(mas, a)
	}
	infos, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil, fmt.Errorf("bootstrap addresses: %w", err)
	}
	return infos, nil
}

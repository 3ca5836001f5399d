package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// DefaultPort is the UDP port of the tensor data plane unless configured otherwise
// (one above the libp2p host's default port).
const DefaultPort = 4243

// Config configures a Plane. Every field documents what its zero value means.
type Config struct {
	// ListenAddr is the UDP host:port the data plane listens and dials from. Empty: an
	// ephemeral port on all interfaces (":0"). DefaultConfig uses DefaultPort.
	ListenAddr string
	// Identity is the node's libp2p private key; the data plane's TLS certificate is bound
	// to it and peers are named by the peer ID derived from it. Required.
	Identity crypto.PrivKey
	// MaxPayload bounds the payload of one incoming frame; a longer one resets its stream
	// before anything is allocated. Zero: frame.DefaultMaxPayload. Sends of larger frames fail.
	MaxPayload int
	// MailboxBytes bounds the payload bytes one peer may have waiting unclaimed in the
	// mailbox; a peer past it is disconnected. Zero: 1 GiB. Negative: no bound.
	MailboxBytes int64
	// MailboxFrames bounds the frames one peer may have waiting unclaimed in the mailbox,
	// whatever their size (each also counts frame.FrameCost bytes against MailboxBytes); a
	// peer past it is disconnected. Zero: 65536. Negative: no bound.
	MailboxFrames int
	// RunsJob reports whether this node runs job (the 64-bit id frames carry): frames of a
	// job it does not run are dropped once they have waited UnknownJobTTL. Nil: every job
	// counts as run here and frames wait until received, purged or their peer leaves.
	RunsJob func(job uint64) bool
	// UnknownJobTTL is how long frames of a job RunsJob denies may wait. It must cover the
	// lag between a peer starting an epoch and this node's control plane applying it.
	// Zero: 1 min.
	UnknownJobTTL time.Duration
	// MaxInFlightBytes bounds the payload bytes of the frames being received at once,
	// from all peers together: a frame's announced payload is reserved after its header and
	// released once the frame is in the mailbox; a frame that does not fit waits unread (QUIC
	// flow control then holds its sender back). Zero: 1 GiB. At least MaxPayload.
	MaxInFlightBytes int64
	// StreamReceiveWindow is the flow-control window of one stream, the most bytes in
	// flight per stream: size it to the bandwidth-delay product of the slowest link
	// you want to fill. Zero: 32 MiB.
	StreamReceiveWindow uint64
	// ConnReceiveWindow is the flow-control window of one connection across its streams.
	// Zero: 64 MiB.
	ConnReceiveWindow uint64
	// MaxIncomingStreams bounds the concurrently open streams a peer may have towards this
	// node (each may hold up to MaxPayload while a frame arrives). Zero: 16.
	MaxIncomingStreams int64
	// MaxConnsPerPeer bounds the connections one peer may hold with this node (two is
	// normal when both dial at once); one more closes the peer's oldest. Zero: 4.
	MaxConnsPerPeer int
	// MaxHandshakes bounds the incoming connections still in their QUIC/TLS handshake, not
	// yet authenticated; one more is refused before any handshake work. Zero: 64.
	MaxHandshakes int
	// HandshakeTimeout bounds an incoming connection's handshake: a peer that does not
	// prove its identity within it is disconnected. Zero: 10 s.
	HandshakeTimeout time.Duration
	// KeepAlive is the interval of keep-alive packets on idle connections. Zero: 10 s.
	KeepAlive time.Duration
	// IdleTimeout closes a connection that received nothing for this long. Zero: 60 s.
	IdleTimeout time.Duration
	// DialTimeout bounds a connection attempt (dial and handshake) on top of the caller's
	// context. Zero: 10 s.
	DialTimeout time.Duration
	// AllowPeer decides whether an authenticated incoming peer may connect (for instance:
	// only peers admitted to the mesh). Nil: every peer that proves its identity.
	AllowPeer func(peerID string) bool
	// OpenStream opens a StreamProtocol stream to a peer over another network (the mesh's
	// libp2p host: a relayed or hole-punched connection) and names the path it rides
	// (PathRelayed, PathHolePunched, PathLibp2p). Frames go that way to a peer that
	// UseStreams named, or that sent frames that way, while no QUIC connection with it is
	// alive. Nil: QUIC only.
	OpenStream StreamOpener
	// Disconnect closes the rest of a peer's connections with this node when the engine
	// caught it breaking the protocol (Misbehaved), after the data plane closed its own: the
	// node closes its libp2p connection, as the mesh does for a malformed message. Nil:
	// the data plane's connections only.
	Disconnect func(peerID, reason string)
	// Logger receives the data plane's logs. Nil: discarded.
	Logger *slog.Logger
}

// DefaultConfig returns the configuration of a node's data plane, listening on
// DefaultPort; Identity must still be set.
func DefaultConfig() Config {
	return Config{
		ListenAddr:          fmt.Sprintf(":%d", DefaultPort),
		MaxPayload:          frame.DefaultMaxPayload,
		MailboxBytes:        1 << 30,
		MaxInFlightBytes:    1 << 30,
		StreamReceiveWindow: 32 << 20,
		ConnReceiveWindow:   64 << 20,
		MaxIncomingStreams:  16,
		MaxConnsPerPeer:     4,
		MaxHandshakes:       64,
		HandshakeTimeout:    10 * time.Second,
		KeepAlive:           10 * time.Second,
		IdleTimeout:         60 * time.Second,
		DialTimeout:         10 * time.Second,
	}
}

// Validate reports the first problem with the configuration, saying what to change.
func (c Config) Validate() error {
	if c.Identity == nil {
		return errors.New("data plane: Identity must be set to the node's libp2p key")
	}
	if c.ListenAddr != "" {
		if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
			return fmt.Errorf("data plane: listen address %q must be host:port (e.g. 0.0.0.0:%d): %v", c.ListenAddr, DefaultPort, err)
		}
	}
	if c.MaxPayload < 0 || uint64(c.MaxPayload) > 1<<32-1 {
		return fmt.Errorf("data plane: MaxPayload must be in [0, 4 GiB) (got %d)", c.MaxPayload)
	}
	if c.MaxIncomingStreams < 0 {
		return fmt.Errorf("data plane: MaxIncomingStreams must be ≥ 0 (got %d)", c.MaxIncomingStreams)
	}
	if c.MaxInFlightBytes < 0 || (c.MaxInFlightBytes > 0 && c.MaxInFlightBytes < int64(c.maxPayload())) {
		return fmt.Errorf("data plane: MaxInFlightBytes must be 0 or at least MaxPayload, %d (got %d)", c.maxPayload(), c.MaxInFlightBytes)
	}
	if c.MaxConnsPerPeer < 0 {
		return fmt.Errorf("data plane: MaxConnsPerPeer must be ≥ 0 (got %d)", c.MaxConnsPerPeer)
	}
	if c.KeepAlive < 0 || c.IdleTimeout < 0 || c.DialTimeout < 0 || c.HandshakeTimeout < 0 {
		return fmt.Errorf("data plane: durations must be ≥ 0 (keep-alive %v, idle %v, dial %v, handshake %v)", c.KeepAlive, c.IdleTimeout, c.DialTimeout, c.HandshakeTimeout)
	}
	if c.UnknownJobTTL < 0 {
		return fmt.Errorf("data plane: UnknownJobTTL must be ≥ 0 (got %v)", c.UnknownJobTTL)
	}
	if c.MaxHandshakes < 0 {
		return fmt.Errorf("data plane: MaxHandshakes must be ≥ 0 (got %d)", c.MaxHandshakes)
	}
	if c.keepAlive() >= c.idleTimeout() {
		return fmt.Errorf("data plane: KeepAlive (%v) must be shorter than IdleTimeout (%v)", c.keepAlive(), c.idleTimeout())
	}
	return nil
}

func (c Config) listenAddr() string   { return orDefault(c.ListenAddr, ":0") }
func (c Config) maxPayload() int      { return orDefault(c.MaxPayload, frame.DefaultMaxPayload) }
func (c Config) streamWindow() uint64 { return orDefault(c.StreamReceiveWindow, 32<<20) }
func (c Config) connWindow() uint64   { return orDefault(c.ConnReceiveWindow, 64<<20) }
func (c Config) maxStreams() int64    { return orDefault(c.MaxIncomingStreams, 16) }
func (c Config) maxConnsPerPeer() int { return orDefault(c.MaxConnsPerPeer, 4) }
func (c Config) maxHandshakes() int   { return orDefault(c.MaxHandshakes, 64) }
func (c Config) handshakeTimeout() time.Duration {
	return orDefault(c.HandshakeTimeout, 10*time.Second)
}
func (c Config) maxInFlight() int64       { return orDefault(c.MaxInFlightBytes, 1<<30) }
func (c Config) keepAlive() time.Duration { return orDefault(c.KeepAlive, 10*time.Second) }
func (c Config) idleTimeout() time.Duration {
	return orDefault(c.IdleTimeout, 60*time.Second)
}
func (c Config) dialTimeout() time.Duration {
	return orDefault(c.DialTimeout, 10*time.Second)
}

func (c Config) mailboxBytes() int64 {
	switch {
	case c.MailboxBytes == 0:
		return 1 << 30
	case c.MailboxBytes < 0:
		return 0 // frame.Mailbox: no bound
	}
	return c.MailboxBytes
}

func (c Config) mailboxFrames() int {
	switch {
	case c.MailboxFrames == 0:
		return 1 << 16
	case c.MailboxFrames < 0:
		return 0 // frame.Mailbox: no bound
	}
	return c.MailboxFrames
}

func (c Config) unknownJobTTL() time.Duration { return orDefault(c.UnknownJobTTL, time.Minute) }

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.Logger
}

// quicConfig is the QUIC configuration of both directions: large receive windows from the
// start (quic-go allocates buffers as data arrives, not up front), keep-alives, and no
// bidirectional streams (the data plane uses one unidirectional stream per purpose).
func (c Config) quicConfig() *quic.Config {
	return &quic.Config{
		InitialStreamReceiveWindow:     c.streamWindow(),
		MaxStreamReceiveWindow:         c.streamWindow(),
		InitialConnectionReceiveWindow: c.connWindow(),
		MaxConnectionReceiveWindow:     c.connWindow(),
		MaxIncomingStreams:             -1,
		MaxIncomingUniStreams:          c.maxStreams(),
		KeepAlivePeriod:                c.keepAlive(),
		MaxIdleTimeout:                 c.idleTimeout(),
		HandshakeIdleTimeout:           c.dialTimeout(),
	}
}

// orDefault returns v, or def when v is the zero value.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

package consensus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// errRefused marks a stream the gate refused after its verdict was written.
var errRefused = errors.New("raft stream refused")

// StreamGate decides which peers may open raft streams, and names the cluster this node
// announces in its own handshakes. Consensus implements it.
type StreamGate interface {
	// ClusterID is the cluster this node belongs to ("" before it joined one).
	ClusterID() string
	// Admit returns nil when peer p, whose hello named cluster, may speak raft here.
	Admit(p peer.ID, cluster string) error
}

// StreamLayer is a raft.StreamLayer over libp2p streams: raft addresses are peer IDs, each
// raft connection is one stream of ProtocolRaft opened by a handshake (handshake.go) that
// the gate must admit. It is safe for concurrent use.
type StreamLayer struct {
	host    host.Host
	proto   protocol.ID
	gate    StreamGate
	timeout time.Duration
	// refused is called with every peer the gate refuses.
	refused func(peer.ID, error)

	incoming  chan inbound
	closeOnce sync.Once
	closed    chan struct{}
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// NewStreamLayer registers the raft protocol handler on h; only streams whose handshake
// gate admits within timeout reach raft. refused (may be nil) hears of each refusal.
// Close removes the handler.
func NewStreamLayer(h host.Host, gate StreamGate, timeout time.Duration, refused func(peer.ID, error)) *StreamLayer {
	if refused == nil {
		refused = func(peer.ID, error) {}
	}
	s := &StreamLayer{host: h, proto: ProtocolRaft, gate: gate, timeout: timeout, refused: refused,
		incoming: make(chan inbound), closed: make(chan struct{})}
	h.SetStreamHandler(s.proto, s.handle)
	return s
}

// inbound is an admitted stream and the cluster its hello named.
type inbound struct {
	st      network.Stream
	cluster string
}

func (s *StreamLayer) handle(st network.Stream) {
	cluster, err := s.serverHandshake(st)
	if err != nil {
		if errors.Is(err, errRefused) {
			_ = st.Close() // the verdict is written: let it reach the dialer
		} else {
			_ = st.Reset()
		}
		return
	}
	select {
	case s.incoming <- inbound{st: st, cluster: cluster}:
	case <-s.closed:
		_ = st.Reset()
	}
}

// serverHandshake reads the dialer's hello, asks the gate, and sends the verdict. It
// returns the cluster the hello named.
func (s *StreamLayer) serverHandshake(st network.Stream) (string, error) {
	_ = st.SetDeadline(time.Now().Add(s.timeout))
	defer st.SetDeadline(time.Time{})
	var h hello
	if err := readJSONFrame(st, &h); err != nil {
		return "", err
	}
	p := st.Conn().RemotePeer()
	if err := s.gate.Admit(p, h.Cluster); err != nil {
		s.refused(p, err)
		if werr := writeJSONFrame(st, verdict{Code: codeOf(err), Error: err.Error()}); werr != nil {
			return "", werr
		}
		return "", fmt.Errorf("%w: %w", errRefused, err)
	}
	return h.Cluster, writeJSONFrame(st, verdict{})
}

// Accept returns the next inbound raft stream as a net.Conn whose every read is admitted
// again (gatedConn).
func (s *StreamLayer) Accept() (net.Conn, error) {
	select {
	case in := <-s.incoming:
		return &gatedConn{streamConn: streamConn{Stream: in.st}, gate: s.gate, cluster: in.cluster, refused: s.refused}, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting streams. Streams already accepted stay open until raft closes them.
func (s *StreamLayer) Close() error {
	s.closeOnce.Do(func() {
		s.host.RemoveStreamHandler(s.proto)
		close(s.closed)
	})
	return nil
}

// Addr is this host's raft address: its peer ID.
func (s *StreamLayer) Addr() net.Addr { return peerAddr(s.host.ID()) }

// Dial opens a raft stream to the peer whose ID is address. The peerstore must know how to
// reach it (the mesh keeps it connected; Reconcile adds the addresses it is given).
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.closed:
		return nil, net.ErrClosed
	default:
	}
	id, err := peer.Decode(string(address))
	if err != nil {
		return nil, fmt.Errorf("raft address %q is not a peer ID: %w", address, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := s.host.NewStream(ctx, id, s.proto)
	if err != nil {
		return nil, fmt.Errorf("dial raft peer %s: %w", id.ShortString(), err)
	}
	if err := clientHandshake(st, st, s.gate.ClusterID(), timeout); err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("raft peer %s: %w", id, err)
	}
	return &streamConn{Stream: st}, nil
}

// streamConn makes a libp2p stream a net.Conn.
type streamConn struct{ network.Stream }

func (c *streamConn) LocalAddr() net.Addr  { return peerAddr(c.Conn().LocalPeer()) }
func (c *streamConn) RemoteAddr() net.Addr { return peerAddr(c.Conn().RemotePeer()) }

// Close closes the stream; if the remote is gone, the stream is reset so nothing lingers.
func (c *streamConn) Close() error {
	if err := c.Stream.Close(); err != nil {
		_ = c.Stream.Reset()
		if !errors.Is(err, network.ErrReset) {
			return err
		}
	}
	return nil
}

// gatedConn is an accepted raft stream that asks the gate again after every read: bytes
// that arrive once the peer is no longer admitted (a voter removed or demoted since the
// stream opened) are dropped and the stream is reset, so raft never decodes an RPC that its
// sender was not allowed to send when it arrived.
type gatedConn struct {
	streamConn
	gate    StreamGate
	cluster string
	refused func(peer.ID, error)
}

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.streamConn.Read(b)
	if n == 0 {
		return n, err
	}
	p := c.Conn().RemotePeer()
	if aerr := c.gate.Admit(p, c.cluster); aerr != nil {
		c.refused(p, aerr)
		_ = c.Reset()
		return 0, fmt.Errorf("raft stream from %s: %w", p, aerr)
	}
	return n, err
}

// peerAddr is a peer ID as a net.Addr.
type peerAddr peer.ID

func (a peerAddr) Network() string { return "libp2p" }
func (a peerAddr) String() string  { return peer.ID(a).String() }

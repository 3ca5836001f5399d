package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshnode/meshnode/mesh/frame"
)

// StreamProtocol is the libp2p protocol that carries tensor frames to a peer that has no
// QUIC path (behind a NAT that nothing can dial through): the same frames as on QUIC, one
// stream per frame kind, written whole one at a time, read with the same bounds.
const StreamProtocol = "/meshnode/tensor/1.0.0"

// Path kinds: what carried a peer's frames (Path, Stats().Paths).
const (
	// PathDirect: a QUIC connection this node dialled at a confirmed address.
	PathDirect = "direct"
	// PathInbound: a QUIC connection the peer dialled (it is behind a NAT).
	PathInbound = "inbound"
	// PathHolePunched: libp2p streams on a direct connection that hole punching (DCUtR)
	// opened.
	PathHolePunched = "hole-punched"
	// PathRelayed: libp2p streams on a circuit-relay connection through a third member.
	PathRelayed = "relayed"
	// PathLibp2p: libp2p streams on a direct libp2p connection that was not hole-punched
	// (the peer's libp2p port answers, its data port does not).
	PathLibp2p = "libp2p"
)

// StreamOpener opens a StreamProtocol stream to peer and names the path it rides.
type StreamOpener func(ctx context.Context, peer string) (network.Stream, string, error)

// ErrNoStreams is returned by Send over streams when Config.OpenStream is nil.
var ErrNoStreams = errors.New("data plane: no libp2p stream path configured")

// streamPeer is a peer reached over libp2p streams: the path its last stream rode and the
// outgoing stream of each frame kind.
type streamPeer struct {
	use  bool   // frames go over streams while no QUIC connection is alive (Plane.mu)
	path string // the path of the last stream opened or accepted (Plane.mu)
	out  map[frame.Kind]*p2pKindStream
}

// p2pKindStream is the outgoing libp2p stream of one frame kind, replaced after a failed
// write; turn holds a token while no frame is being written.
type p2pKindStream struct {
	turn chan struct{}
	s    network.Stream
}

// UseStreams says whether frames to peer go over libp2p streams while no QUIC connection
// with it is alive (the node's link prober: none of its addresses answered and it holds no
// connection to this node). A live QUIC connection always wins.
func (d *Plane) UseStreams(peer string, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.route(peer).use = on
}

// RenewStreams closes the outgoing libp2p streams to peer once the frame being written on
// each is done, so that the next frames open new streams on the best connection libp2p
// then holds: after hole punching, the direct one instead of the relay. Frames already
// written still arrive (the streams are closed, not reset).
func (d *Plane) RenewStreams(peer string) {
	d.mu.Lock()
	var kinds []*p2pKindStream
	if sp := d.routes[peer]; sp != nil {
		for _, ks := range sp.out {
			kinds = append(kinds, ks)
		}
	}
	d.mu.Unlock()
	for _, ks := range kinds {
		<-ks.turn
		if ks.s != nil {
			d.dropStream(ks.s)
			_ = ks.s.Close()
			ks.s = nil
		}
		ks.turn <- struct{}{}
	}
}

// StreamsConfigured reports whether the data plane can carry frames over libp2p streams.
func (d *Plane) StreamsConfigured() bool { return d.cfg.OpenStream != nil }

// Path is the kind of path frames to peer take now: PathDirect or PathInbound for a live
// QUIC connection, the stream path when frames go over libp2p, "" when nothing reached the
// peer yet.
func (d *Plane) Path(peer string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[peer]; p != nil {
		if c := p.sendConn(); c != nil {
			return c.path
		}
	}
	if sp := d.routes[peer]; sp != nil && sp.use {
		return sp.path
	}
	return ""
}

// route returns peer's stream state, creating it. Called with d.mu held.
func (d *Plane) route(peer string) *streamPeer {
	sp := d.routes[peer]
	if sp == nil {
		sp = &streamPeer{out: map[frame.Kind]*p2pKindStream{}}
		d.routes[peer] = sp
	}
	return sp
}

// streamRoute returns peer's stream state when frames to it go over libp2p streams: it
// uses them and no QUIC connection with it is alive.
func (d *Plane) streamRoute(peer string) *streamPeer {
	d.mu.Lock()
	defer d.mu.Unlock()
	sp := d.routes[peer]
	if sp == nil || !sp.use || d.cfg.OpenStream == nil {
		return nil
	}
	if p := d.peers[peer]; p != nil && p.sendConn() != nil {
		return nil
	}
	return sp
}

// kindStream returns the outgoing stream slot of kind k.
func (d *Plane) p2pKind(sp *streamPeer, k frame.Kind) *p2pKindStream {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := sp.out[k]
	if ks == nil {
		ks = &p2pKindStream{turn: make(chan struct{}, 1)}
		ks.turn <- struct{}{}
		sp.out[k] = ks
	}
	return ks
}

// sendOverStream writes one frame (its encoded header hdr and payload) on the libp2p
// stream of its kind to peer `to`, opening the stream first. As on QUIC, a frame is written
// whole; if ctx ends or the write fails, the stream is reset (the receiver drops the
// partial frame) and the next frame opens a new one.
func (d *Plane) sendOverStream(ctx context.Context, to string, sp *streamPeer, f *frame.Frame, hdr []byte) error {
	ks := d.p2pKind(sp, f.Kind)
	select {
	case <-ks.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { ks.turn <- struct{}{} }()
	if ks.s == nil {
		s, path, err := d.openStream(ctx, to)
		if err != nil {
			return fmt.Errorf("data plane: send kind-%d frame to %s over libp2p: %w", f.Kind, to, err)
		}
		d.mu.Lock()
		sp.path = path
		d.mu.Unlock()
		ks.s = s
	}
	s := ks.s
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	_, err := s.Write(hdr)
	if err == nil {
		_, err = s.Write(f.Payload)
	}
	if !stop() && err == nil {
		err = fmt.Errorf("write interrupted: %w", ctx.Err())
	}
	if err != nil {
		d.dropStream(s)
		_ = s.Reset()
		ks.s = nil
		return fmt.Errorf("data plane: send kind-%d frame to %s over libp2p: %w", f.Kind, to, err)
	}
	d.mu.Lock()
	path := sp.path
	d.mu.Unlock()
	d.stats.count(dirSent, to, path, f)
	return nil
}

// openStream opens an outgoing stream and tracks it, so that Close resets it.
func (d *Plane) openStream(ctx context.Context, to string) (network.Stream, string, error) {
	if d.cfg.OpenStream == nil {
		return nil, "", ErrNoStreams
	}
	s, path, err := d.cfg.OpenStream(ctx, to)
	if err != nil {
		return nil, "", err
	}
	if !d.trackStream(s) {
		_ = s.Reset()
		return nil, "", ErrClosed
	}
	d.log.Debug("opened libp2p stream", "peer", to, "path", path)
	return s, path, nil
}

// trackStream records an open libp2p stream; false once the data plane is closed.
func (d *Plane) trackStream(s network.Stream) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.p2p[s] = struct{}{}
	return true
}

func (d *Plane) dropStream(s network.Stream) {
	d.mu.Lock()
	delete(d.p2p, s)
	d.mu.Unlock()
}

// ServeStream reads frames from an incoming StreamProtocol stream of peer (the remote of
// the stream's connection, authenticated by libp2p) that rides path, exactly as a QUIC
// stream is read: each frame bounded by MaxPayload before allocation and reserved against
// MaxInFlightBytes, a bad frame counted and its stream reset, a peer past MailboxBytes
// disconnected. From then on frames to that peer go back over streams while no QUIC
// connection with it is alive. It returns when the stream ends; register it (behind the
// mesh's admission) as the StreamProtocol handler.
func (d *Plane) ServeStream(s network.Stream, path string) {
	peer := s.Conn().RemotePeer().String()
	if d.cfg.AllowPeer != nil && !d.cfg.AllowPeer(peer) {
		d.log.Warn("refused libp2p stream of a peer not allowed", "peer", peer)
		_ = s.Reset()
		return
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = s.Reset()
		return
	}
	d.p2p[s] = struct{}{}
	sp := d.route(peer)
	sp.use, sp.path = true, path
	d.wg.Add(1)
	d.mu.Unlock()
	defer d.wg.Done()
	defer d.dropStream(s)
	_ = s.CloseWrite() // frames flow one way on a stream, as QUIC's unidirectional ones
	for {
		f, err := d.readFrame(s)
		if err != nil {
			d.endP2PStream(peer, s, err)
			return
		}
		d.stats.count(dirReceived, peer, path, f)
		if f.Kind == frame.KindProbe {
			d.handleProbeFrame(peer, f)
			continue
		}
		if err := d.box.Deliver(peer, f); err != nil {
			_ = s.Reset()
			if errors.Is(err, frame.ErrMailboxFull) {
				d.stats.overflow(peer)
				d.log.Warn("peer overflowed the mailbox; disconnecting", "peer", peer, "err", err)
				_ = s.Conn().Close()
			}
			return
		}
	}
}

// endP2PStream resets a stream whose frame was bad (counted, logged) and closes a clean
// or broken one.
func (d *Plane) endP2PStream(peer string, s network.Stream, err error) {
	code, bad := frameResetCode(err)
	if !bad {
		_ = s.Close()
		return
	}
	_ = s.ResetWithError(network.StreamErrorCode(code))
	d.stats.badFrame(peer)
	d.log.Warn("bad frame on libp2p stream; stream reset", "peer", peer, "code", uint64(code), "err", err)
}

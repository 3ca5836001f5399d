package parallel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Transport moves tensor frames between the engine's peers (pipeline neighbours and
// replicas). The QUIC data plane (dataplane.Plane) implements it across machines; InMemory
// implements it inside one process for tests. Peers are named by their node IDs.
type Transport interface {
	// Self is this peer's ID.
	Self() string
	// Send delivers f to peer `to`. It may return before the peer has read the frame.
	Send(ctx context.Context, to string, f *frame.Frame) error
	// Recv waits for the next frame from peer `from` with key k. Frames may arrive in any
	// order; each is handed to the receiver that asks for its key.
	Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error)
}

// MisbehaviourReporter is a Transport that acts on a peer caught breaking the protocol
// (docs/security.md, "A peer that breaks the protocol is disconnected"): the data plane
// closes the peer's connections, as it does for a peer that floods its mailbox; InMemory
// records the report for tests. The worker calls it only for bytes the peer itself
// authored on its own authenticated connection that no honest member can send (a frame of
// the wrong length for its kind and step, a codec the round does not use, pieces that
// break their rules), never for a stale frame or for values it judges bad: those fail the
// step or go the offender path as before, so an honest peer is never disconnected for
// them.
type MisbehaviourReporter interface {
	// Misbehaved reports that peer sent what the protocol never sends; reason says what.
	Misbehaved(peer, reason string)
}

// misbehaved reports peer to tr when tr acts on misbehaviour, and does nothing otherwise
// (a transport without connections to close).
func misbehaved(tr Transport, peer, reason string) {
	if m, ok := tr.(MisbehaviourReporter); ok {
		m.Misbehaved(peer, reason)
	}
}

// errMalformed marks a frame whose form no honest member sends (wrong dtype, codec or
// length for its kind and step): its sender broke the protocol, as with errPieces.
var errMalformed = errors.New("malformed frame")

// violation says whether err names a protocol violation by the frame's sender (errPieces,
// errMalformed): what makes the worker report the sender's misbehaviour to the transport,
// beside failing or refusing as before. A transport's error (a stall, a closed
// connection) and a stale frame are not.
func violation(err error) bool {
	return errors.Is(err, errPieces) || errors.Is(err, errMalformed)
}

// InMemory is a set of in-process peers connected to each other: each has a mailbox, and
// Send delivers straight into the receiver's. It counts bytes sent per kind.
type InMemory struct {
	mu         sync.Mutex
	boxes      map[string]*frame.Mailbox
	misbehaved []Misbehaviour
	sent       [8]atomic.Int64 // payload bytes by frame kind
	frames     [8]atomic.Int64 // frames by kind
	maxPayload atomic.Int64    // 0: unbounded
}

// NewInMemory returns an in-process network of the named peers.
func NewInMemory(peers ...string) *InMemory {
	n := &InMemory{boxes: map[string]*frame.Mailbox{}}
	for _, p := range peers {
		n.boxes[p] = frame.NewMailbox(0)
	}
	return n
}

// SetMaxPayload makes Send refuse a frame whose payload passes n bytes (frame.ErrTooBig),
// as the data plane refuses frames over its MaxPayload, and makes the peers' collectives
// cut their messages into pieces of n bytes (PieceBytes is the data plane's): a test's
// small model then needs many pieces. Set it before the peers exchange anything.
func (n *InMemory) SetMaxPayload(max int) { n.maxPayload.Store(int64(max)) }

// SentFrames reports the frames of kind k sent by all peers.
func (n *InMemory) SentFrames(k frame.Kind) int64 { return n.frames[k].Load() }

// Peer returns peer id's endpoint.
func (n *InMemory) Peer(id string) Transport { return &inMemoryPeer{net: n, id: id} }

// SentBytes reports the payload bytes sent in frames of kind k by all peers.
func (n *InMemory) SentBytes(k frame.Kind) int64 { return n.sent[k].Load() }

// Misbehaviour is one report a peer of an InMemory network made: By caught Peer breaking
// the protocol (MisbehaviourReporter).
type Misbehaviour struct {
	By, Peer, Reason string
}

// Misbehaviours returns the reports the network's peers made, in the order they made
// them. The in-memory network records them and disconnects nobody.
func (n *InMemory) Misbehaviours() []Misbehaviour {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.misbehaved)
}

// Close wakes every waiting receiver with an error.
func (n *InMemory) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range n.boxes {
		b.Close(nil)
	}
}

type inMemoryPeer struct {
	net *InMemory
	id  string
}

func (p *inMemoryPeer) Self() string { return p.id }

// PieceBytes is the size collectives cut messages at: the network's payload bound, if set.
func (p *inMemoryPeer) PieceBytes() int { return int(p.net.maxPayload.Load()) }

// Misbehaved records p's report that peer broke the protocol (InMemory.Misbehaviours).
func (p *inMemoryPeer) Misbehaved(peer, reason string) {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	p.net.misbehaved = append(p.net.misbehaved, Misbehaviour{By: p.id, Peer: peer, Reason: reason})
}

func (p *inMemoryPeer) Send(_ context.Context, to string, f *frame.Frame) error {
	p.net.mu.Lock()
	box := p.net.boxes[to]
	p.net.mu.Unlock()
	if box == nil {
		return fmt.Errorf("in-memory transport: no peer %q", to)
	}
	if max := p.net.maxPayload.Load(); max > 0 && int64(len(f.Payload)) > max {
		return fmt.Errorf("in-memory transport: %w: %d bytes > %d", frame.ErrTooBig, len(f.Payload), max)
	}
	// The receiver owns what it receives: copy, as a network would.
	cp := *f
	cp.Payload = append([]byte(nil), f.Payload...)
	cp.Shape = append([]int(nil), f.Shape...)
	p.net.sent[int(f.Kind)%len(p.net.sent)].Add(int64(len(f.Payload)))
	p.net.frames[int(f.Kind)%len(p.net.frames)].Add(1)
	return box.Deliver(p.id, &cp)
}

func (p *inMemoryPeer) Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error) {
	p.net.mu.Lock()
	box := p.net.boxes[p.id]
	p.net.mu.Unlock()
	return box.Receive(ctx, from, k)
}

// soloTransport is the transport of a plan of one worker (one stage, one replica): there
// is no peer to send to or receive from. Such a worker exchanges nothing (its collectives
// have one member), so a call is a bug, reported as an error.
type soloTransport struct{}

func (soloTransport) Self() string { return soloNode }
func (soloTransport) Send(_ context.Context, to string, f *frame.Frame) error {
	return fmt.Errorf("a single-process run has no peer %q to send a frame of kind %d to", to, f.Kind)
}
func (soloTransport) Recv(_ context.Context, from string, k frame.Key) (*frame.Frame, error) {
	return nil, fmt.Errorf("a single-process run has no peer %q to receive a frame of kind %d from", from, k.Kind)
}

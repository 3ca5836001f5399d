package dataplane

import (
	"maps"
	"sync"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Traffic counts frames and their payload bytes in one direction. Wire bytes add
// frame.HeaderSize per frame.
type Traffic struct {
	Frames int64
	Bytes  int64
}

// Stats is a snapshot of a data plane's counters since it started.
type Stats struct {
	// Sent and Received hold the traffic per peer ID and frame kind. Sent counts frames
	// handed to QUIC, Received frames that passed every check.
	Sent     map[string]map[frame.Kind]Traffic
	Received map[string]map[frame.Kind]Traffic
	// Flows holds the same traffic split further by codec, one entry per direction, peer,
	// kind and codec seen.
	Flows []Flow
	// BadFrames counts, per peer, frames that failed validation and reset their stream.
	BadFrames map[string]int64
	// MailboxOverflows counts, per peer, disconnections for exceeding MailboxBytes.
	MailboxOverflows map[string]int64
	// Misbehaved counts, per peer, disconnections for a protocol violation the engine
	// found in what the peer sent (Plane.Misbehaved).
	Misbehaved map[string]int64
	// EvictedConns counts, per peer, connections closed because the peer opened more than
	// MaxConnsPerPeer.
	EvictedConns map[string]int64
	// ResentFrames counts, per peer, frames sent again to the peer's new process after a
	// connection to its old one ended in a stateless reset (resend.go).
	ResentFrames map[string]int64
	// Paths holds, per peer ID and path kind (PathDirect, PathInbound, PathHolePunched,
	// PathRelayed, PathLibp2p), the traffic carried on that path, both directions summed.
	Paths map[string]map[string]Traffic
	// InFlightBytes is the payload bytes reserved now by frames being received (at most
	// MaxInFlightBytes); InFlightWaits counts frames that waited for room in that budget.
	InFlightBytes, InFlightWaits int64
	// Handshaking is the incoming connections in their handshake now (at most
	// MaxHandshakes); RefusedHandshakes counts the attempts refused because that many were.
	Handshaking, RefusedHandshakes int64
	// ExpiredFrames counts frames of jobs this node does not run (Config.RunsJob) dropped
	// after waiting Config.UnknownJobTTL.
	ExpiredFrames int64
}

// SentBytes is the payload bytes sent in frames of kind k to all peers.
func (s Stats) SentBytes(k frame.Kind) int64 { return sumKind(s.Sent, k) }

// ReceivedBytes is the payload bytes received in frames of kind k from all peers.
func (s Stats) ReceivedBytes(k frame.Kind) int64 { return sumKind(s.Received, k) }

// TotalBadFrames is the number of bad frames from all peers.
func (s Stats) TotalBadFrames() int64 {
	var n int64
	for _, v := range s.BadFrames {
		n += v
	}
	return n
}

func sumKind(m map[string]map[frame.Kind]Traffic, k frame.Kind) int64 {
	var n int64
	for _, kinds := range m {
		n += kinds[k].Bytes
	}
	return n
}

// Flow is the traffic of one direction, peer, frame kind and codec.
type Flow struct {
	Sent  bool // false: received
	Peer  string
	Kind  frame.Kind
	Codec frame.Codec
	Traffic
}

type direction int

const (
	dirSent direction = iota
	dirReceived
)

type trafficKey struct {
	dir   direction
	peer  string
	kind  frame.Kind
	codec frame.Codec
}

// counters holds the counters behind Stats. Updates are per frame, so one mutex is cheap.
type counters struct {
	mu        sync.Mutex
	traffic   map[trafficKey]Traffic
	bad       map[string]int64
	overflows map[string]int64
	misbehave map[string]int64
	evicted   map[string]int64
	resends   map[string]int64
	paths     map[[2]string]Traffic // {peer, path}
}

func (s *counters) init() {
	s.traffic = map[trafficKey]Traffic{}
	s.bad = map[string]int64{}
	s.overflows = map[string]int64{}
	s.misbehave = map[string]int64{}
	s.evicted = map[string]int64{}
	s.resends = map[string]int64{}
	s.paths = map[[2]string]Traffic{}
}

// count records frame f sent to or received from peer over a path of kind path.
func (s *counters) count(dir direction, peer, path string, f *frame.Frame) {
	k := trafficKey{dir, peer, f.Kind, f.Codec}
	s.mu.Lock()
	t := s.traffic[k]
	t.Frames++
	t.Bytes += int64(len(f.Payload))
	s.traffic[k] = t
	pk := [2]string{peer, path}
	t = s.paths[pk]
	t.Frames++
	t.Bytes += int64(len(f.Payload))
	s.paths[pk] = t
	s.mu.Unlock()
}

func (s *counters) badFrame(peer string) {
	s.mu.Lock()
	s.bad[peer]++
	s.mu.Unlock()
}

func (s *counters) connEvicted(peer string) {
	s.mu.Lock()
	s.evicted[peer]++
	s.mu.Unlock()
}

func (s *counters) resent(peer string) {
	s.mu.Lock()
	s.resends[peer]++
	s.mu.Unlock()
}

func (s *counters) misbehaved(peer string) {
	s.mu.Lock()
	s.misbehave[peer]++
	s.mu.Unlock()
}

func (s *counters) overflow(peer string) {
	s.mu.Lock()
	s.overflows[peer]++
	s.mu.Unlock()
}

// Stats returns a snapshot of the data plane's counters.
func (d *Plane) Stats() Stats {
	s := &d.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{
		Sent:             map[string]map[frame.Kind]Traffic{},
		Received:         map[string]map[frame.Kind]Traffic{},
		BadFrames:        make(map[string]int64, len(s.bad)),
		MailboxOverflows: maps.Clone(s.overflows),
		Misbehaved:       maps.Clone(s.misbehave),
		EvictedConns:     maps.Clone(s.evicted),
		ResentFrames:     maps.Clone(s.resends),
		Paths:            map[string]map[string]Traffic{},
	}
	for k, t := range s.paths {
		if out.Paths[k[0]] == nil {
			out.Paths[k[0]] = map[string]Traffic{}
		}
		out.Paths[k[0]][k[1]] = t
	}
	out.InFlightBytes, out.InFlightWaits = d.inflight.snapshot()
	out.Handshaking, out.RefusedHandshakes = d.hs.snapshot()
	out.ExpiredFrames = d.box.Expired()
	for k, t := range s.traffic {
		m := out.Sent
		if k.dir == dirReceived {
			m = out.Received
		}
		if m[k.peer] == nil {
			m[k.peer] = map[frame.Kind]Traffic{}
		}
		sum := m[k.peer][k.kind]
		sum.Frames += t.Frames
		sum.Bytes += t.Bytes
		m[k.peer][k.kind] = sum
		out.Flows = append(out.Flows, Flow{Sent: k.dir == dirSent, Peer: k.peer, Kind: k.kind, Codec: k.codec, Traffic: t})
	}
	for p, n := range s.bad {
		out.BadFrames[p] = n
	}
	return out
}

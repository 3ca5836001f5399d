package mesh

import (
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/records"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// PeerState is a peer's liveness as judged from the age of its last heartbeat
// (records.PeerState: the API serves it).
type PeerState = records.PeerState

// Peer states. A peer is alive while its last heartbeat is younger than SuspectAfter,
// suspect until DeadAfter, dead after that or as soon as it announced it is leaving.
const (
	StateAlive   = records.PeerAlive
	StateSuspect = records.PeerSuspect
	StateDead    = records.PeerDead
)

// Link is what the probes measured towards one peer. Zero values mean "not measured yet".
type Link struct {
	// RTT is the median round-trip time of the last probe.
	RTT time.Duration
	// BandwidthBps is the last measured throughput towards the peer, in bytes per second.
	BandwidthBps float64
	// MeasuredAt is when the last probe finished (successfully or not).
	MeasuredAt time.Time
	// Err describes why the last probe failed; empty when it succeeded.
	Err string
	// Source is the probe that measured the link.
	Source LinkSource
	// Addr is where a data-plane probe reached the peer: the candidate of its DataAddrs
	// that a handshake confirmed, or "inbound" when none did and the probe went over a
	// connection the peer opened (it is behind a NAT). Empty for libp2p probes.
	Addr string
}

// LinkSource names a link probe.
type LinkSource string

// Link sources. A data-plane measurement is preferred: it follows the path tensors take.
const (
	// LinkLibp2p: ProtocolProbe on the libp2p connection (the mesh's own probe loop).
	LinkLibp2p LinkSource = "libp2p"
	// LinkDataPlane: KindProbe frames over the QUIC tensor data plane.
	LinkDataPlane LinkSource = "dataplane"
)

// PeerInfo is one row of the peer table, a copy the caller may keep.
type PeerInfo struct {
	ID       peer.ID
	Addrs    []ma.Multiaddr
	State    PeerState
	LastSeen time.Time
	Profile  *Profile
	// Link is the preferred measurement: the data plane's once it measured numbers (even
	// if its latest probe failed, Err then says why), else the libp2p probe's.
	Link Link
	// Links holds the latest measurement of every source that probed the peer.
	Links []Link
}

type peerEntry struct {
	addrs    []ma.Multiaddr
	lastSeen time.Time
	seq      uint64
	left     bool
	profile  *Profile
	link     Link // LinkLibp2p
	dataLink Link // LinkDataPlane
}

// preferred is the link PeerInfo.Link shows.
func (e *peerEntry) preferred() Link {
	if e.dataLink.RTT > 0 || e.link.MeasuredAt.IsZero() {
		return e.dataLink
	}
	return e.link
}

func (e *peerEntry) links() []Link {
	var out []Link
	for _, l := range []Link{e.dataLink, e.link} {
		if !l.MeasuredAt.IsZero() {
			out = append(out, l)
		}
	}
	return out
}

// peerTable keeps what heartbeats and probes said about every other member.
type peerTable struct {
	suspectAfter, deadAfter, forgetAfter time.Duration
	now                                  func() time.Time

	mu    sync.Mutex
	peers map[peer.ID]*peerEntry
}

func newPeerTable(suspectAfter, deadAfter, forgetAfter time.Duration) *peerTable {
	return &peerTable{suspectAfter: suspectAfter, deadAfter: deadAfter, forgetAfter: forgetAfter,
		now: time.Now, peers: map[peer.ID]*peerEntry{}}
}

// observe records a heartbeat from p. It reports whether p joined: it was unknown or dead
// before this heartbeat and is alive now.
func (t *peerTable) observe(p peer.ID, hb *heartbeat) (joined bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.peers[p]
	if !ok {
		e = &peerEntry{}
		t.peers[p] = e
	}
	wasDead := !ok || t.stateLocked(e, now) == StateDead
	if ok && hb.Seq <= e.seq {
		return false // a stale or duplicate heartbeat arriving late
	}
	e.seq, e.lastSeen, e.left = hb.Seq, now, hb.Leaving
	e.addrs = hb.multiaddrs()
	if hb.Profile != nil {
		e.profile = hb.Profile.Clone()
	}
	return wasDead && !hb.Leaving
}

// setLink records a measurement of l.Source (LinkLibp2p when empty) towards p, a peer
// already in the table.
func (t *peerTable) setLink(p peer.ID, l Link) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.peers[p]
	if !ok {
		return
	}
	switch l.Source {
	case LinkDataPlane:
		e.dataLink = l
	default:
		l.Source = LinkLibp2p
		e.link = l
	}
}

func (t *peerTable) stateLocked(e *peerEntry, now time.Time) PeerState {
	age := now.Sub(e.lastSeen)
	switch {
	case e.left || age >= t.deadAfter:
		return StateDead
	case age >= t.suspectAfter:
		return StateSuspect
	default:
		return StateAlive
	}
}

// snapshot returns every known peer sorted by ID, dropping those dead for longer than
// forgetAfter.
func (t *peerTable) snapshot() []PeerInfo {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PeerInfo, 0, len(t.peers))
	for p, e := range t.peers {
		if now.Sub(e.lastSeen) >= t.forgetAfter {
			delete(t.peers, p)
			continue
		}
		out = append(out, PeerInfo{ID: p, Addrs: append([]ma.Multiaddr(nil), e.addrs...),
			State: t.stateLocked(e, now), LastSeen: e.lastSeen, Profile: e.profile.Clone(), Link: e.preferred(),
			Links: e.links()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// deadSince is when p's last process was held dead: deadAfter past the last time it was
// heard (or when it said it left), the zero time when p is unknown or not dead.
func (t *peerTable) deadSince(p peer.ID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.peers[p]
	if !ok || t.stateLocked(e, t.now()) != StateDead {
		return time.Time{}
	}
	if e.left {
		return e.lastSeen
	}
	return e.lastSeen.Add(t.deadAfter)
}

// state returns p's state, and false when p is not in the table.
func (t *peerTable) state(p peer.ID) (PeerState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.peers[p]
	if !ok {
		return "", false
	}
	return t.stateLocked(e, t.now()), true
}

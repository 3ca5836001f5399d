package mesh

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ErrNotAdmitted is returned when a peer has not proved knowledge of the join secret.
var ErrNotAdmitted = errors.New("peer not admitted to the mesh")

// admission runs the auth exchange with every newly connected peer and remembers the
// outcome per peer until its last connection closes. Both sides initiate an exchange on
// a new connection (so neither depends on the other's notion of who dialled) and a peer is
// admitted once either exchange verified its proof. A peer that sends a wrong proof or a
// malformed message is banned in the gater (for the ban duration) and disconnected. A peer
// that is merely slow is not punished: when an attempt's timeout passes, the exchange is
// started again with twice the time, authAttempts times in all, within one window from the
// connection (Config.AuthWindow); only a peer silent through them is disconnected, and held
// off briefly rather than banned. At most maxPending peers connected inbound wait for their
// admission at once: one more is disconnected at once.
type admission struct {
	host    host.Host
	gater   *gater
	secret  []byte
	mesh    string
	timeout time.Duration
	window  time.Duration // the whole admission of a peer, from its first connection
	// maxPending bounds the undecided peers; an inbound connection of a new peer past it
	// is closed at once.
	maxPending int
	log        *slog.Logger
	onAdmit    func(peer.ID) // called once per admission, on its own goroutine

	ctx context.Context // cancelled at shutdown

	mu      sync.Mutex
	peers   map[peer.ID]*admitState
	pending int // states in peers not yet decided

	failures atomic.Uint64
	refused  atomic.Uint64
	retries  atomic.Uint64 // auth attempts started again after a timeout
	crowded  atomic.Uint64 // inbound connections closed because maxPending peers were pending
}

type admitState struct {
	done     chan struct{} // closed once decided
	admitted bool          // valid after done is closed
	attempt  int           // 0-based; guarded by admission.mu
	timer    *time.Timer
	deadline time.Time // the end of its admission window
}

const (
	// authAttempts is how many auth exchanges a connected peer gets, each with twice the
	// time of the one before (AuthTimeout, 2×, 4×).
	authAttempts = 3
	// holdOffFactor × AuthTimeout is how long a peer silent through every attempt is
	// refused before it may connect again.
	holdOffFactor = 8
)

// attemptTimeout is the time attempt n (0-based) of an auth exchange has, if the window
// leaves it.
func (a *admission) attemptTimeout(n int) time.Duration { return a.timeout << n }

// stateTimeout is the time st's current attempt has: attemptTimeout, cut at the end of
// its window.
func (a *admission) stateTimeout(st *admitState) time.Duration {
	return max(0, min(a.attemptTimeout(st.attempt), time.Until(st.deadline)))
}

// currentTimeout is the time p's current auth attempt has. An exchange with a peer whose
// admission is already decided gets a first attempt's time: that peer is a new process
// with its identity (a member restarted while its old connection was still open, so its
// state was never forgotten), and the old window's remainder, long zero, would fail every
// answer to it: the restarted member could never admit this node (issue 26's rejoin).
func (a *admission) currentTimeout(p peer.ID) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.peers[p]; ok && !isClosed(st.done) {
		return a.stateTimeout(st)
	}
	return min(a.timeout, a.window)
}

func newAdmission(ctx context.Context, h host.Host, g *gater, cfg Config, log *slog.Logger) *admission {
	return &admission{
		host: h, gater: g, secret: []byte(cfg.JoinSecret), mesh: cfg.meshName(),
		timeout: cfg.authTimeout(), window: cfg.authWindow(), maxPending: cfg.maxPendingAuth(), log: log, ctx: ctx, peers: map[peer.ID]*admitState{},
		onAdmit: func(peer.ID) {},
	}
}

// start registers the auth handler and the connection notifications, and starts an
// exchange with every peer already connected.
func (a *admission) start() {
	a.host.SetStreamHandler(ProtocolAuth, a.handleAuth)
	a.host.Network().Notify(&network.NotifyBundle{
		ConnectedF:    func(_ network.Network, c network.Conn) { a.connected(c) },
		DisconnectedF: func(_ network.Network, c network.Conn) { a.disconnected(c.RemotePeer()) },
	})
	for _, p := range a.host.Network().Peers() {
		a.ensure(p)
	}
}

// connected starts the admission of a newly connected peer. An inbound connection of a
// peer with no admission under way is closed at once while maxPending peers are pending:
// peer IDs are free to mint, and each pending peer holds a connection and a timer.
// Connections this node dialled are never refused here.
func (a *admission) connected(c network.Conn) {
	p := c.RemotePeer()
	if c.Stat().Direction == network.DirInbound {
		a.mu.Lock()
		_, known := a.peers[p]
		crowded := !known && a.pending >= a.maxPending
		a.mu.Unlock()
		if crowded {
			a.crowded.Add(1)
			a.log.Info("too many peers authenticating; closed a new one", "peer", p, "pending", a.maxPending)
			go c.Close()
			return
		}
	}
	a.ensure(p)
}

// ensure returns p's state, creating it and starting an exchange if p has none.
func (a *admission) ensure(p peer.ID) *admitState {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.peers[p]; ok {
		return st
	}
	st := &admitState{done: make(chan struct{}), deadline: time.Now().Add(a.window)}
	a.peers[p] = st
	a.pending++
	st.timer = time.AfterFunc(a.stateTimeout(st), func() { a.expire(p, st) })
	go a.initiate(p)
	return st
}

// decideLocked closes st's done channel once: its admission is decided. Called with a.mu.
func (a *admission) decideLocked(st *admitState) bool {
	if isClosed(st.done) {
		return false
	}
	close(st.done)
	a.pending--
	return true
}

// isAdmitted reports, without waiting, whether p is admitted.
func (a *admission) isAdmitted(p peer.ID) bool {
	a.mu.Lock()
	st, ok := a.peers[p]
	a.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-st.done:
		return st.admitted
	default:
		return false
	}
}

// wait blocks until p's admission is decided (at most the auth timeout after it
// connected) or ctx ends, and reports whether p is admitted. p must be connected.
func (a *admission) wait(ctx context.Context, p peer.ID) bool {
	if p == a.host.ID() {
		return true
	}
	if !connectedAny(a.host.Network(), p) {
		return false
	}
	st := a.ensure(p)
	select {
	case <-st.done:
		return st.admitted
	case <-ctx.Done():
		return false
	}
}

// admitted lists the peers admitted so far and still connected.
func (a *admission) admitted() []peer.ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []peer.ID
	for p, st := range a.peers {
		select {
		case <-st.done:
			if st.admitted {
				out = append(out, p)
			}
		default:
		}
	}
	return out
}

func (a *admission) initiate(p peer.ID) {
	timeout := a.currentTimeout(p)
	ctx, cancel := context.WithTimeout(a.ctx, timeout)
	defer cancel()
	// A member behind a NAT may be connected only through a relay (a limited connection):
	// it is admitted over it like over any other.
	s, err := a.host.NewStream(network.WithAllowLimitedConn(ctx, "meshnode admission"), p, ProtocolAuth)
	if err != nil {
		// Not fatal by itself: the peer may still authenticate to us. The timer decides.
		a.log.Debug("open auth stream", "peer", p, "err", err)
		return
	}
	_ = s.SetDeadline(time.Now().Add(timeout))
	a.finish(p, s, a.party(p).initiate(s))
}

func (a *admission) handleAuth(s network.Stream) {
	p := s.Conn().RemotePeer()
	a.ensure(p)
	_ = s.SetDeadline(time.Now().Add(a.currentTimeout(p)))
	a.finish(p, s, a.party(p).respond(s))
}

func (a *admission) party(p peer.ID) authParty {
	return authParty{secret: a.secret, mesh: a.mesh, self: a.host.ID(), remote: p, rand: rand.Reader}
}

// finish closes the exchange's stream and records its outcome.
func (a *admission) finish(p peer.ID, s network.Stream, err error) {
	switch {
	case err == nil:
		_ = s.Close()
		a.admit(p)
	case errors.Is(err, errAuthProtocol):
		lingerAndReset(s)
		a.fail(p, err.Error())
	default:
		_ = s.Reset()
		a.log.Debug("auth exchange", "peer", p, "err", err)
	}
}

func (a *admission) admit(p peer.ID) {
	a.mu.Lock()
	st, ok := a.peers[p]
	decided := ok && isClosed(st.done)
	if ok && !decided {
		st.admitted = true
		st.timer.Stop()
		a.decideLocked(st)
	}
	a.mu.Unlock()
	if ok && !decided {
		a.log.Info("peer admitted", "peer", p)
		go a.onAdmit(p)
	}
}

// fail refuses p for a wrong proof or a protocol violation: banned, disconnected, logged.
// An already admitted peer that misbehaves on the auth protocol is only disconnected.
func (a *admission) fail(p peer.ID, reason string) {
	a.mu.Lock()
	st, ok := a.peers[p]
	wasAdmitted := ok && isClosed(st.done) && st.admitted
	if ok && !isClosed(st.done) {
		st.timer.Stop()
		a.decideLocked(st)
	}
	a.mu.Unlock()
	if !wasAdmitted {
		a.gater.ban(p)
		a.failures.Add(1)
	}
	a.log.Warn("peer refused admission", "peer", p, "reason", reason, "banned", !wasAdmitted)
	_ = a.host.Network().ClosePeer(p)
}

// expire runs when p's current attempt timed out: if p is still undecided and connected,
// it starts the next attempt with twice the time (cut at the end of the window), or gives
// up after the last one or once the window is over.
func (a *admission) expire(p peer.ID, st *admitState) {
	a.mu.Lock()
	current := a.peers[p] == st && !isClosed(st.done)
	retry := current && st.attempt+1 < authAttempts && time.Until(st.deadline) > 0
	if retry {
		st.attempt++
		st.timer = time.AfterFunc(a.stateTimeout(st), func() { a.expire(p, st) })
	}
	attempt, timeout := st.attempt, a.stateTimeout(st)
	a.mu.Unlock()
	if !current {
		return
	}
	if !connectedAny(a.host.Network(), p) {
		a.disconnected(p)
		return
	}
	if retry {
		a.retries.Add(1)
		a.log.Info("auth attempt timed out; retrying", "peer", p, "attempt", attempt+1, "timeout", timeout)
		go a.initiate(p)
		return
	}
	a.giveUp(p, st)
}

// giveUp disconnects a peer that stayed silent through every auth attempt and holds it off
// for holdOffFactor × AuthTimeout. It is not banned: it may be slow, not hostile.
func (a *admission) giveUp(p peer.ID, st *admitState) {
	a.mu.Lock()
	a.decideLocked(st)
	attempts := st.attempt + 1
	a.mu.Unlock()
	a.gater.refuse(p, holdOffFactor*a.timeout)
	a.failures.Add(1)
	a.log.Warn("peer did not authenticate; disconnected", "peer", p, "attempts", attempts,
		"window", a.window, "hold_off", holdOffFactor*a.timeout)
	_ = a.host.Network().ClosePeer(p)
}

// disconnected forgets p once its last connection is gone, so that a reconnect runs a
// fresh exchange. Waiters on an undecided state are released with "not admitted".
func (a *admission) disconnected(p peer.ID) {
	if len(a.host.Network().ConnsToPeer(p)) > 0 {
		return
	}
	a.mu.Lock()
	st, ok := a.peers[p]
	if ok {
		delete(a.peers, p)
		st.timer.Stop()
		a.decideLocked(st)
	}
	a.mu.Unlock()
}

// lingerAndReset lets a reject reach the peer: it closes the write side and waits (at most
// a second) for the peer to hang up before resetting the stream.
func lingerAndReset(s network.Stream) {
	_ = s.CloseWrite()
	_ = s.SetReadDeadline(time.Now().Add(time.Second))
	var buf [64]byte
	for {
		if _, err := s.Read(buf[:]); err != nil {
			break
		}
	}
	_ = s.Reset()
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

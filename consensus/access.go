package consensus

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Who may talk to the control plane. The mesh's admission (a join secret or an allowlist)
// decides who may connect at all; this file decides which connected peers may speak raft
// or make requests of the control plane:
//   - a peer of another cluster (its handshake names a different cluster ID) is refused;
//   - raft streams are served only to the voters of this node's latest raft configuration,
//     and to the few peers this node itself asked to be let in by (the leader it sent its
//     join to, and the voters that leader named), for trustTTL: non-voters receive raft's
//     RPCs, they never send them, so a joined non-voter cannot append entries, ask for
//     votes or install snapshots. The check is repeated on every read of an accepted
//     stream (streamlayer.go), so a voter that is removed loses its open streams;
//   - every RPC operation except "leader" and "join" is served only to the servers
//     (voters and non-voters) of that configuration and to the same trusted peers;
//   - the identity of a peer is the authenticated libp2p connection's remote peer, never a
//     field of a request.

// trustTTL bounds how long a peer this node joined through is trusted without being in its
// raft configuration: long enough for the configuration that names it to arrive.
const trustTTL = time.Minute

// maxTrusted bounds the trust set.
const maxTrusted = 64

// trustSet is the set of peers this node asked to be let in by, each until a deadline.
type trustSet struct {
	mu    sync.Mutex
	until map[peer.ID]time.Time
}

func (t *trustSet) add(p peer.ID, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.until == nil {
		t.until = map[peer.ID]time.Time{}
	}
	for id, u := range t.until {
		if now.After(u) || len(t.until) >= maxTrusted {
			delete(t.until, id)
		}
	}
	t.until[p] = now.Add(trustTTL)
}

func (t *trustSet) has(p peer.ID, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.until[p]
	return ok && !now.After(u)
}

// isMember reports whether p is a server of this node's latest raft configuration.
func (c *Consensus) isMember(p peer.ID) bool {
	r := c.raftRef.Load()
	if r == nil {
		return false
	}
	id := raft.ServerID(p.String())
	return slices.ContainsFunc(r.GetConfiguration().Configuration().Servers, func(s raft.Server) bool { return s.ID == id })
}

// isVoter reports whether p is a voter of this node's latest raft configuration (the
// latest, not the committed one, as raft itself uses: a voter just added is a voter as soon
// as its configuration entry is appended here).
func (c *Consensus) isVoter(p peer.ID) bool {
	r := c.raftRef.Load()
	if r == nil {
		return false
	}
	id := raft.ServerID(p.String())
	return slices.ContainsFunc(r.GetConfiguration().Configuration().Servers, func(s raft.Server) bool {
		return s.ID == id && s.Suffrage == raft.Voter
	})
}

// checkCluster refuses a peer whose handshake names another cluster. An empty ID on
// either side (a fresh node) leaves the decision to membership.
func (c *Consensus) checkCluster(p peer.ID, remote string) error {
	local := c.ClusterID()
	if local != "" && remote != "" && remote != local {
		return fmt.Errorf("%w: peer %s is in cluster %s, this node is in cluster %s; two independently bootstrapped clusters never merge (wipe the raft dir of the node that should join the other cluster)",
			ErrForeignCluster, p, remote, local)
	}
	return nil
}

// Admit decides whether peer p, whose handshake named cluster, may make member-only
// requests here (raft streams are AdmitRaft's). It returns an error wrapping ErrForeignCluster or
// ErrNotMember when not.
func (c *Consensus) Admit(p peer.ID, cluster string) error {
	if err := c.checkCluster(p, cluster); err != nil {
		return err
	}
	if p == c.host.ID() || c.isMember(p) || c.trusted.has(p, time.Now()) {
		return nil
	}
	return fmt.Errorf("%w: peer %s is not in this node's raft configuration", ErrNotMember, p)
}

// AdmitRaft decides whether peer p, whose handshake named cluster, may send raft RPCs to
// this node: itself, a voter of its latest raft configuration, or a peer it joined through.
// It returns an error wrapping ErrForeignCluster, ErrNotVoter (a non-voter) or ErrNotMember.
func (c *Consensus) AdmitRaft(p peer.ID, cluster string) error {
	if err := c.checkCluster(p, cluster); err != nil {
		return err
	}
	if p == c.host.ID() || c.isVoter(p) || c.trusted.has(p, time.Now()) {
		return nil
	}
	c.rejoinIfStale()
	if c.isMember(p) {
		return fmt.Errorf("%w: peer %s is a non-voter of this node's raft configuration; non-voters receive raft RPCs, they do not send them", ErrNotVoter, p)
	}
	return fmt.Errorf("%w: peer %s is not in this node's raft configuration", ErrNotMember, p)
}

// raftGate is the StreamGate of the raft transport: voters only (AdmitRaft).
type raftGate struct{ c *Consensus }

func (g raftGate) ClusterID() string                     { return g.c.ClusterID() }
func (g raftGate) Admit(p peer.ID, cluster string) error { return g.c.AdmitRaft(p, cluster) }

// logRefusal logs a refusal at most once a minute per peer and kind, so a peer that
// retries does not flood the log.
func (c *Consensus) logRefusal(what string, p peer.ID, err error) {
	key := what + " " + p.String()
	c.refusedMu.Lock()
	last, seen := c.refusedAt[key]
	now := time.Now()
	if seen && now.Sub(last) < time.Minute {
		c.refusedMu.Unlock()
		return
	}
	if len(c.refusedAt) >= 1024 {
		clear(c.refusedAt)
	}
	c.refusedAt[key] = now
	c.refusedMu.Unlock()
	c.log.Warn("refused "+what, "peer", p, "err", err)
}

package consensus

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A node away while the group changed can come back with a stale configuration in which
// the current leader is a non-voter (it was promoted since) or absent (it joined since).
// Its raft gate then refuses the leader's streams (access.go) and it would never learn
// the new configuration. So when the gate refuses a peer while this node has not heard
// from a leader for a while, it announces itself again (at most once per rejoinEvery):
// the leader's join answer names its voters, which this node trusts for trustTTL, long
// enough to receive the configuration that names them. This is the same trust on first
// use as a fresh join (docs/security.md).

// rejoinEvery bounds how often a stale node announces itself again; it is below trustTTL
// so that the trust one announce gives lasts until the next.
const rejoinEvery = trustTTL / 2

// rejoinSignal wakes announceLoop.
type rejoinSignal struct {
	ask  chan struct{}
	mu   sync.Mutex
	last time.Time
}

// rejoinIfStale asks for a new announce when this node is a follower that has heard from
// no leader for two election timeouts, at most once per rejoinEvery.
func (c *Consensus) rejoinIfStale() {
	r := c.raftRef.Load()
	if r == nil || r.State() == raft.Leader || time.Since(r.LastContact()) < 2*c.cfg.ElectionTimeout {
		return
	}
	c.rejoin.mu.Lock()
	defer c.rejoin.mu.Unlock()
	if now := time.Now(); now.Sub(c.rejoin.last) >= rejoinEvery {
		c.rejoin.last = now
		select {
		case c.rejoin.ask <- struct{}{}:
		default:
		}
	}
}

package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Promotion of non-voters, as etcd's learners and Consul's autopilot do it: every server
// joins as a non-voter and becomes a voter only once it holds the log (it has applied the
// configuration that added it and trails the leader's commit index by at most
// maxPromoteLag entries), has passed its probation or been approved by an operator and not
// refused (promotion.go), and a voter seat is free (fewer than Config.Voters). A joiner
// therefore never weakens the quorum while it catches up, a peer that joins and then does
// not replicate never gets a vote, and one that does must behave for a while first.

// maxPromoteLag is how far behind the leader's commit index a non-voter may be and still
// count as caught up.
const maxPromoteLag = 64

// autopilotLoop fills voter seats with caught-up non-voters while this node leads.
func (c *Consensus) autopilotLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		select {
		case <-c.shutdownCh:
			return
		case <-t.C:
		}
		if !c.IsLeader() {
			c.probation.reset()
			continue
		}
		c.autopilotTick()
	}
}

// autopilotTick promotes under memberMu, so that it never races Reconcile or a join past
// the voter cap.
func (c *Consensus) autopilotTick() {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	ctx, cancel := context.WithTimeout(c.baseCtx, c.cfg.RPCTimeout)
	defer cancel()
	if err := c.promoteAlive(ctx); err != nil && c.IsLeader() && c.baseCtx.Err() == nil {
		c.log.Debug("promote non-voters", "err", err)
	}
}

// fillVoters promotes live, caught-up non-voters while voter seats are free.
func (c *Consensus) fillVoters(ctx context.Context, servers []raft.Server, live map[raft.ServerID]bool) error {
	for voterCount(servers) < c.cfg.Voters {
		cand, ok := c.promotable(ctx, servers, live)
		if !ok {
			return nil
		}
		if err := c.futureErr(ctx, c.raft.AddVoter(cand, raft.ServerAddress(cand), 0, c.cfg.RPCTimeout)); err != nil {
			return fmt.Errorf("promote %s: %w", cand, err)
		}
		c.log.Info("promoted caught-up non-voter", "id", cand)
		var err error
		if servers, err = c.servers(ctx); err != nil {
			return err
		}
	}
	return nil
}

// promotable picks the live, caught-up non-voter with the smallest ID, for determinism.
func (c *Consensus) promotable(ctx context.Context, servers []raft.Server, live map[raft.ServerID]bool) (raft.ServerID, bool) {
	cfgIndex := c.raft.GetConfiguration().Index()
	for _, id := range sortedIDs(live) {
		if !live[id] || !isNonvoter(servers, id) || !c.mayPromote(id) {
			continue
		}
		if c.caughtUp(ctx, id, cfgIndex) {
			return id, true
		}
	}
	return "", false
}

func isNonvoter(servers []raft.Server, id raft.ServerID) bool {
	for _, s := range servers {
		if s.ID == id {
			return s.Suffrage == raft.Nonvoter
		}
	}
	return false
}

// caughtUp asks id how far its raft has applied.
func (c *Consensus) caughtUp(ctx context.Context, id raft.ServerID, cfgIndex uint64) bool {
	p, err := peer.Decode(string(id))
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout/2)
	defer cancel()
	out, err := c.call(ctx, p, "applied", []byte("{}"))
	if err != nil {
		return false
	}
	var info AppliedInfo
	if json.Unmarshal(out, &info) != nil {
		return false
	}
	return info.Applied >= cfgIndex && info.Applied+maxPromoteLag >= c.raft.CommitIndex()
}

// aliveInFSM marks each server by whether the FSM records its node as alive.
func (c *Consensus) aliveInFSM(servers []raft.Server) map[raft.ServerID]bool {
	alive := map[raft.ServerID]bool{}
	for _, s := range servers {
		n, ok := c.fsm.Node(string(s.ID))
		alive[s.ID] = ok && n.Status == NodeAlive
	}
	return alive
}

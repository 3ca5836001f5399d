package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/multiformats/go-multiaddr"
)

// Member is one peer as the mesh sees it, fed to Reconcile.
type Member struct {
	// ID is the peer's ID, which is also its raft server ID and address.
	ID peer.ID
	// Addrs are the peer's multiaddrs; they are added to the peerstore so raft can dial it.
	Addrs []multiaddr.Multiaddr
	// Live is false when the mesh has declared the peer dead (missed heartbeats).
	Live bool
	// Profile is the peer's capability summary; nil keeps what the FSM has.
	Profile *Profile
}

// JoinArgs announces a node to the leader. Node.ID must be the caller's own peer ID (or
// empty): a node joins only as itself.
type JoinArgs struct {
	Node Node `json:"node"`
}

// JoinResult tells a joiner which cluster it joined and the voters of the leader's raft
// configuration, which it trusts until its own configuration names them. Non-voters are
// not named: they never send raft RPCs.
type JoinResult struct {
	ClusterID string   `json:"cluster_id"`
	Servers   []string `json:"servers"`
}

// LeaveArgs asks the leader to remove a node that is leaving cleanly. ID must be the
// caller's own peer ID (or empty): a node leaves only as itself.
type LeaveArgs struct {
	ID string `json:"id"`
}

// announceLoop tells the leader this node exists, retrying until it succeeds or the
// component shuts down, and again whenever rejoin asks (rejoin.go). The leader adds it to
// the raft group and records it as alive.
func (c *Consensus) announceLoop() {
	defer c.wg.Done()
	for {
		c.announce()
		select {
		case <-c.rejoin.ask:
		case <-c.shutdownCh:
			return
		}
	}
}

// announce sends one join, retried until it succeeds or the component shuts down.
func (c *Consensus) announce() {
	self := Node{ID: c.host.ID().String(), Addrs: addrStrings(c.host.Addrs()), Profile: c.cfg.Profile, Status: NodeAlive}
	var res JoinResult
	err := c.do(c.baseCtx, "join", JoinArgs{Node: self}, &res)
	if err == nil {
		err = c.adoptClusterID(res.ClusterID)
		for _, s := range res.Servers {
			if id, derr := peer.Decode(s); derr == nil {
				c.trusted.add(id, time.Now())
			}
		}
	}
	switch {
	case err == nil:
		c.log.Info("joined the raft group", "leader", c.Leader(), "cluster", res.ClusterID)
	case !errors.Is(err, ErrShutdown) && c.baseCtx.Err() == nil:
		c.log.Warn("announce to leader failed", "err", err)
	}
}

// Reconcile brings the raft group in line with the mesh's view of its members. Every node
// may call it (it only teaches the peerstore addresses); on the leader it also:
//   - adds live members that are not in the group (voters while fewer than Config.Voters,
//     then non-voters), except nodes that left cleanly and have not announced themselves
//     again;
//   - replaces each voter that members marks dead by a live non-voter (promote, then
//     remove the dead one), and promotes live non-voters while voters are missing;
//   - records each member's addresses, profile and status (alive or dead) in the FSM.
//
// Members absent from the list are left alone. The leader always counts itself live.
func (c *Consensus) Reconcile(ctx context.Context, members []Member) error {
	for _, m := range members {
		if len(m.Addrs) > 0 && m.ID != c.host.ID() {
			c.host.Peerstore().AddAddrs(m.ID, m.Addrs, peerstore.RecentlyConnectedAddrTTL)
		}
	}
	if !c.IsLeader() {
		return nil
	}
	if err := c.ensureClusterMeta(ctx); err != nil {
		return err
	}
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	live := map[raft.ServerID]bool{raft.ServerID(c.host.ID().String()): true}
	for _, m := range members {
		if m.ID != c.host.ID() {
			live[raft.ServerID(m.ID.String())] = m.Live
		}
	}
	if err := c.addLive(ctx, live); err != nil {
		return err
	}
	if err := c.replaceDead(ctx, live); err != nil {
		return err
	}
	return c.recordMembers(ctx, members)
}

func (c *Consensus) addLive(ctx context.Context, live map[raft.ServerID]bool) error {
	servers, err := c.servers(ctx)
	if err != nil {
		return err
	}
	for _, id := range sortedIDs(live) {
		if !live[id] || slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) {
			continue
		}
		// Only a node that joined this cluster as itself before is added back: a peer the
		// mesh merely sees (another cluster's node, a node that never asked) is not.
		if n, ok := c.fsm.Node(string(id)); !ok || n.Status == NodeLeft {
			continue
		}
		if servers, err = c.addServer(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// replaceDead promotes live non-voters in place of dead voters, then removes the dead, and
// fills any missing voter slots.
func (c *Consensus) replaceDead(ctx context.Context, live map[raft.ServerID]bool) error {
	servers, err := c.servers(ctx)
	if err != nil {
		return err
	}
	for _, s := range servers {
		dead := s.Suffrage == raft.Voter && !live[s.ID]
		if _, known := live[s.ID]; !dead || !known {
			continue
		}
		cand, ok := c.promotable(ctx, servers, live)
		if !ok {
			continue // nobody to replace it with: a dead voter is better than a smaller quorum
		}
		c.log.Info("replacing dead voter", "dead", s.ID, "with", cand)
		if err := c.futureErr(ctx, c.raft.AddVoter(cand, raft.ServerAddress(cand), 0, c.cfg.RPCTimeout)); err != nil {
			return fmt.Errorf("promote %s: %w", cand, err)
		}
		if err := c.futureErr(ctx, c.raft.RemoveServer(s.ID, 0, c.cfg.RPCTimeout)); err != nil {
			return fmt.Errorf("remove dead voter %s: %w", s.ID, err)
		}
		if servers, err = c.servers(ctx); err != nil {
			return err
		}
	}
	return c.fillVoters(ctx, servers, live)
}

func (c *Consensus) recordMembers(ctx context.Context, members []Member) error {
	for _, m := range members {
		n, ok := c.fsm.Node(m.ID.String())
		if !ok && m.ID != c.host.ID() {
			continue // a node is recorded when it joins as itself, not when the mesh sees it
		}
		if n.Status == NodeLeft && m.Live {
			continue // it announces itself when it comes back
		}
		want := n
		want.ID = m.ID.String()
		want.Status = NodeDead
		if m.Live || m.ID == c.host.ID() {
			want.Status = NodeAlive
		}
		if len(m.Addrs) > 0 {
			want.Addrs = addrStrings(m.Addrs)
		}
		if m.Profile != nil {
			want.Profile = *m.Profile
		}
		want = want.bounded()
		if ok && sameNode(n, want) {
			continue
		}
		want.UpdatedAt = now()
		if _, err := c.propose(ctx, NodeUpsertType, NodeUpsertRequest{Node: want}); err != nil {
			return err
		}
	}
	return nil
}

// addServer adds id as a non-voter and returns the new server list. It becomes a voter
// once it has caught up and a voter seat is free (autopilot.go), so a joiner never counts
// toward the quorum before it holds the log.
func (c *Consensus) addServer(ctx context.Context, id raft.ServerID) ([]raft.Server, error) {
	if err := c.futureErr(ctx, c.raft.AddNonvoter(id, raft.ServerAddress(id), 0, c.cfg.RPCTimeout)); err != nil {
		return nil, fmt.Errorf("add %s to the raft group: %w", id, err)
	}
	c.log.Info("added raft member as non-voter", "id", id)
	return c.servers(ctx)
}

func (c *Consensus) handleJoin(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[JoinArgs](body)
	if err != nil {
		return nil, err
	}
	n := args.Node.bounded()
	if n.ID == "" {
		n.ID = from.String()
	}
	if n.ID != from.String() {
		return nil, fmt.Errorf("%w: %s asked to join as %s; a node joins only as itself", ErrForbidden, from, n.ID)
	}
	n.Status = NodeAlive
	if err := n.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := c.ensureClusterMeta(ctx); err != nil {
		return nil, err
	}
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	servers, err := c.servers(ctx)
	if err != nil {
		return nil, err
	}
	id := raft.ServerID(n.ID)
	if !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) {
		if servers, err = c.addServer(ctx, id); err != nil {
			return nil, err
		}
	}
	res := JoinResult{ClusterID: c.ClusterID()}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			res.Servers = append(res.Servers, string(s.ID))
		}
	}
	if old, ok := c.fsm.Node(n.ID); ok && sameNode(old, n) {
		return res, nil
	}
	n.UpdatedAt = now()
	_, err = c.propose(ctx, NodeUpsertType, NodeUpsertRequest{Node: n})
	return res, err
}

func (c *Consensus) handleLeave(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[LeaveArgs](body)
	if err != nil {
		return nil, err
	}
	if args.ID == "" {
		args.ID = from.String()
	}
	if args.ID != from.String() {
		return nil, fmt.Errorf("%w: %s asked to remove %s; a node leaves only as itself", ErrForbidden, from, args.ID)
	}
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	if _, err := c.propose(ctx, NodeStatusType, NodeStatusRequest{ID: args.ID, Status: NodeLeft, Time: now()}); err != nil {
		return nil, err
	}
	servers, err := c.servers(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == args.ID })
	if i < 0 || (servers[i].Suffrage == raft.Voter && voterCount(servers) == 1) {
		return struct{}{}, nil // not a member, or the last voter: keep the group alive
	}
	if err := c.futureErr(ctx, c.raft.RemoveServer(servers[i].ID, 0, c.cfg.RPCTimeout)); err != nil {
		return nil, fmt.Errorf("remove %s: %w", args.ID, err)
	}
	c.log.Info("removed raft member that left", "id", args.ID)
	if servers[i].Suffrage != raft.Voter || !c.IsLeader() {
		return struct{}{}, nil
	}
	return struct{}{}, c.promoteAlive(ctx)
}

// promoteAlive fills voter slots with caught-up non-voters the FSM records as alive.
func (c *Consensus) promoteAlive(ctx context.Context) error {
	servers, err := c.servers(ctx)
	if err != nil {
		return err
	}
	alive := c.aliveInFSM(servers)
	c.probation.observe(servers, alive, time.Now())
	return c.fillVoters(ctx, servers, alive)
}

// Leave removes this node from the group cleanly and shuts it down: a leader first hands
// leadership to another voter, then the leader removes this node and records it as left.
func (c *Consensus) Leave(ctx context.Context) error {
	if c.IsLeader() {
		servers, err := c.servers(ctx)
		if err == nil && voterCount(servers) > 1 {
			if err := c.futureErr(ctx, c.raft.LeadershipTransfer()); err != nil {
				c.log.Warn("leadership transfer before leaving failed", "err", err)
			}
		}
	}
	err := c.do(ctx, "leave", LeaveArgs{ID: c.host.ID().String()}, nil)
	return errors.Join(err, c.Shutdown())
}

// servers is the latest raft configuration.
func (c *Consensus) servers(ctx context.Context) ([]raft.Server, error) {
	f := c.raft.GetConfiguration()
	if err := c.futureErr(ctx, f); err != nil {
		return nil, fmt.Errorf("read raft configuration: %w", err)
	}
	return f.Configuration().Servers, nil
}

func voterCount(servers []raft.Server) int {
	n := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

func sortedIDs(m map[raft.ServerID]bool) []raft.ServerID {
	ids := make([]raft.ServerID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func sameNode(a, b Node) bool {
	return a.ID == b.ID && a.Status == b.Status && a.Profile == b.Profile && slices.Equal(a.Addrs, b.Addrs)
}

func addrStrings(addrs []multiaddr.Multiaddr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}

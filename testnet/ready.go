package testnet

import (
	"context"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/mesh"
)

// WaitReady waits until the testnet can take a job: every running node sees every other
// running node alive with a measured profile, has probed its link to it (RTT known, or a
// probe error reported) and sees in its profile a data-plane link to every other node
// (the matrix the leader plans with), all of them name the same Raft leader, and each sees min(n, 3)
// Raft voters (the nodes' default voter seats), so that losing any one node leaves the
// control plane a quorum, and every node sees a speed proof of every other node but the
// leader (docs/mesh.md, "Speed proofs": the leader plans a member only once it proved its
// speed, and a job submitted earlier waits for the proofs). On timeout the error
// says what was still missing. It waits until ctx ends: give it a deadline.
func (t *Testnet) WaitReady(ctx context.Context) error {
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := t.notReady(ctx)
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testnet not ready after %s: %s", time.Since(start).Round(time.Second), missing)
		case <-tick.C:
		}
	}
}

// notReady returns what keeps the testnet from being ready, or "" when it is.
func (t *Testnet) notReady(ctx context.Context) string {
	var live []*Node
	for _, n := range t.Nodes() {
		if !n.Alive() {
			continue
		}
		live = append(live, n)
	}
	if len(live) == 0 {
		return "no node is running"
	}
	leader := ""
	for _, n := range live {
		if why := nodeNotReady(ctx, n, live); why != "" {
			return why
		}
		st, err := n.Client().Raft(ctx)
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Spec.Name, err)
		}
		switch {
		case st.Leader == "":
			return fmt.Sprintf("%s knows no Raft leader", n.Spec.Name)
		case leader != "" && st.Leader != leader:
			return fmt.Sprintf("nodes disagree on the Raft leader (%s and %s)", leader, st.Leader)
		case len(st.Voters) < min(len(live), 3):
			// Joiners become voters after their probation (--raft-probation): until then
			// losing the first node would leave the control plane without a quorum.
			return fmt.Sprintf("%s sees %d Raft voters, want %d", n.Spec.Name, len(st.Voters), min(len(live), 3))
		}
		leader = st.Leader
	}
	for _, n := range live {
		if why := proofsNotSeen(ctx, n, live, leader); why != "" {
			return why
		}
	}
	return ""
}

// proofsNotSeen checks that n sees the leader's proof of every other live node's speed
// (any committed proof: a rate, 0 for a late answer, or a lie), the leader excepted,
// which no one challenges.
func proofsNotSeen(ctx context.Context, n *Node, live []*Node, leader string) string {
	peers, err := n.Client().Peers(ctx)
	if err != nil {
		return fmt.Sprintf("%s: %v", n.Spec.Name, err)
	}
	proved := map[string]bool{}
	for _, p := range peers {
		proved[p.ID] = p.ProvedGFLOPS != nil
	}
	for _, o := range live {
		if o != n && o.ID != leader && !proved[o.ID] {
			return fmt.Sprintf("%s sees no proof of %s's speed yet", n.Spec.Name, o.Spec.Name)
		}
	}
	return ""
}

// nodeNotReady checks n's view of the other live nodes.
func nodeNotReady(ctx context.Context, n *Node, live []*Node) string {
	peers, err := n.Client().Peers(ctx)
	if err != nil {
		return fmt.Sprintf("%s: %v", n.Spec.Name, err)
	}
	byID := map[string]int{}
	for i, p := range peers {
		byID[p.ID] = i
	}
	for _, o := range live {
		if o == n {
			continue
		}
		i, ok := byID[o.ID]
		switch {
		case !ok:
			return fmt.Sprintf("%s has not met %s", n.Spec.Name, o.Spec.Name)
		case peers[i].State != mesh.StateAlive:
			return fmt.Sprintf("%s sees %s %s", n.Spec.Name, o.Spec.Name, peers[i].State)
		case peers[i].Profile == nil || peers[i].Profile.GemmGFLOPS <= 0:
			return fmt.Sprintf("%s has no profile of %s", n.Spec.Name, o.Spec.Name)
		case peers[i].RTTMs == nil && peers[i].ProbeError == "":
			return fmt.Sprintf("%s has not probed its link to %s", n.Spec.Name, o.Spec.Name)
		}
		if x := missingDataLink(n, o, live, peers, byID); x != nil {
			return fmt.Sprintf("%s sees no data-plane link of %s to %s", n.Spec.Name, o.Spec.Name, x.Spec.Name)
		}
	}
	return ""
}

// missingDataLink is the first live node that o announces no link to, as n sees o's
// profile, among those o sends tensors to over the data plane (both have a data-plane
// address; a testnet's nodes have one each or none). A node publishes only its data
// plane's measurement of such a link (node/engine.go), so until this is nil the leader
// would price the pair like the worst link it knows, not what the emulated WAN does.
func missingDataLink(n, o *Node, live []*Node, peers []api.Peer, byID map[string]int) *Node {
	prof := peers[byID[o.ID]].Profile
	if prof.DataAddr == "" {
		return nil
	}
	has := map[string]bool{}
	for _, l := range prof.Links {
		has[l.Peer] = true
	}
	for _, x := range live {
		if x == o || has[x.ID] {
			continue
		}
		if j, ok := byID[x.ID]; x == n || ok && peers[j].Profile != nil && peers[j].Profile.DataAddr != "" {
			return x
		}
	}
	return nil
}

package consensus

import (
	"context"
	"slices"

	"github.com/hashicorp/raft"
)

// Status reports this node's view of the group from local state.
func (c *Consensus) Status(ctx context.Context) (RaftStatus, error) {
	st := RaftStatus{
		ID: c.host.ID().String(), State: c.raft.State().String(), Leader: c.Leader().String(),
		Term: c.raft.CurrentTerm(), AppliedIndex: c.raft.AppliedIndex(), CommitIndex: c.raft.CommitIndex(),
		Voters: []string{}, Nonvoters: []string{},
	}
	servers, err := c.servers(ctx)
	if err != nil {
		return st, err
	}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			st.Voters = append(st.Voters, string(s.ID))
		} else {
			st.Nonvoters = append(st.Nonvoters, string(s.ID))
		}
	}
	slices.Sort(st.Voters)
	slices.Sort(st.Nonvoters)
	return st, nil
}

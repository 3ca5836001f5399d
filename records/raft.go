package records

// RaftStatus is this node's view of the raft group, as `meshnode raft status` prints it.
type RaftStatus struct {
	ID           string   `json:"id"`
	State        string   `json:"state"`
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	Voters       []string `json:"voters"`
	Nonvoters    []string `json:"nonvoters"`
	AppliedIndex uint64   `json:"applied_index"`
	CommitIndex  uint64   `json:"commit_index"`
}

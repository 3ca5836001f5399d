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

// PromotionDecision is an operator's decision on a non-voter's promotion: "approved",
// "refused", or "" (none: promoted after its probation).
type PromotionDecision string

// PromotionResult is what `meshnode raft promote|refuse ID` did.
type PromotionResult struct {
	ID       string            `json:"id"`
	Decision PromotionDecision `json:"decision"`
	// Suffrage is the node's suffrage after the decision: "voter" or "nonvoter".
	Suffrage string `json:"suffrage"`
	// Note explains a promotion that did not happen yet (no free seat, not caught up).
	Note string `json:"note,omitempty"`
}

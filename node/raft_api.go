package node

import (
	"context"
	"net/http"

	"github.com/meshnode/meshnode/consensus"
)

// raftRoutes serves the operator's promotion decisions (consensus/promotion.go):
//
//	POST /v1/raft/promote/{id}   approve non-voter id → consensus.PromotionResult
//	POST /v1/raft/refuse/{id}    refuse non-voter id  → consensus.PromotionResult
//
// 400 names a bad or unknown id or a voter; 403 when this node is not a voter (decisions
// are made through a voter's API).
func (n *Node) raftRoutes(s *consensusService) {
	h := jobHandlers{s: s}
	n.mux.HandleFunc("POST /v1/raft/promote/{id}", func(w http.ResponseWriter, r *http.Request) {
		h.promotion(w, r, (*consensus.Consensus).Promote)
	})
	n.mux.HandleFunc("POST /v1/raft/refuse/{id}", func(w http.ResponseWriter, r *http.Request) {
		h.promotion(w, r, (*consensus.Consensus).Refuse)
	})
}

func (h jobHandlers) promotion(w http.ResponseWriter, r *http.Request,
	decide func(*consensus.Consensus, context.Context, string) (consensus.PromotionResult, error)) {
	c := h.consensus(w)
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), jobAPITimeout)
	defer cancel()
	res, err := decide(c, ctx, r.PathValue("id"))
	if err != nil {
		replyError(w, statusOf(err), err)
		return
	}
	replyJSON(w, http.StatusOK, res)
}

package node

import (
	"encoding/json"
	"io"
	"math"
	"net/http"

	"github.com/meshnode/meshnode/kernels"
)

// SlowdownPath is the testnet hook's request that changes the node's emulated slowdown
// (kernels.SetSlowdown) while it runs: PUT with a JSON number, the factor (≥ 1; 1 turns
// the emulation off); 204 once set. It is served on PartitionSocket, only when
// PartitionHookEnv is set, as `meshnode testnet slow` uses it to emulate a node that
// becomes slower than its profile mid-job (throttled, shared). The node's profile keeps
// the rates it measured: only its steps show the change.
const SlowdownPath = "/slowdown"

// maxSlowdown bounds the factor the hook accepts.
const maxSlowdown = 1000

func (h *partitionHook) slowdown(w http.ResponseWriter, r *http.Request) {
	var factor float64
	if err := json.NewDecoder(io.LimitReader(r.Body, 64)).Decode(&factor); err != nil {
		http.Error(w, "a JSON number, the slowdown factor: "+err.Error(), http.StatusBadRequest)
		return
	}
	if math.IsNaN(factor) || factor < 1 || factor > maxSlowdown {
		http.Error(w, "the slowdown factor must be between 1 and 1000", http.StatusBadRequest)
		return
	}
	kernels.SetSlowdown(factor)
	h.n.log.Warn("testnet slowdown hook: emulated slowdown changed", "factor", factor)
	w.WriteHeader(http.StatusNoContent)
}

package consensus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/meshnode/meshnode/records"
)

// A node's claimed compute speed is trusted only as far as it proved it: the leader
// challenges each member (node/speedproof) and commits what the member proved, stamped
// with its own ID, so that every later leader plans with the same proofs. Only the leader
// writes them: no RPC operation forwards one, so a member cannot vouch for itself.

// SpeedProof is what one challenge proved of node ID's compute speed.
type SpeedProof struct {
	ID string `json:"id"`
	// ClaimGFLOPS is the speed the node's profile claimed when it was challenged (what
	// the challenge was sized for).
	ClaimGFLOPS float64 `json:"claim_gflops"`
	// GFLOPS is the speed it proved: the challenge's FLOPs over its round trip; 0 when it
	// did not answer in time, or answered wrongly.
	GFLOPS float64 `json:"gflops"`
	// Wrong is set when the answer was wrong: the node lied about what it computed.
	Wrong bool `json:"wrong,omitempty"`
	// Time is when the leader checked the answer; By is that leader.
	Time time.Time `json:"time"`
	By   string    `json:"by"`
}

// SpeedProofRequest commits a speed proof (SpeedProofType).
type SpeedProofRequest struct {
	Proof SpeedProof `json:"proof"`
}

// MaxSpeedProofs bounds the proofs the FSM keeps; past it the oldest is dropped.
const MaxSpeedProofs = 4096

func (p SpeedProof) validate() error {
	errs := []error{checkNodeID("speed proof node", p.ID), checkNodeID("speed proof by", p.By)}
	for name, v := range map[string]float64{"claim_gflops": p.ClaimGFLOPS, "gflops": p.GFLOPS} {
		if math.IsNaN(v) || v < 0 || v > records.MaxProfileGFLOPS {
			errs = append(errs, fmt.Errorf("speed proof %s %v: not in [0, %g]", name, v, records.MaxProfileGFLOPS))
		}
	}
	if p.Wrong && p.GFLOPS != 0 {
		errs = append(errs, fmt.Errorf("speed proof: a wrong answer proves nothing (gflops %v)", p.GFLOPS))
	}
	return errors.Join(errs...)
}

func (r SpeedProofRequest) validate() error { return r.Proof.validate() }

func (f *FSM) applySpeedProof(req SpeedProofRequest) any {
	if f.state.SpeedProofs == nil {
		f.state.SpeedProofs = map[string]SpeedProof{}
	}
	if _, ok := f.state.SpeedProofs[req.Proof.ID]; !ok && len(f.state.SpeedProofs) >= MaxSpeedProofs {
		oldest := ""
		for id, p := range f.state.SpeedProofs {
			if o, ok := f.state.SpeedProofs[oldest]; !ok || p.Time.Before(o.Time) || p.Time.Equal(o.Time) && id < oldest {
				oldest = id
			}
		}
		delete(f.state.SpeedProofs, oldest)
	}
	f.state.SpeedProofs[req.Proof.ID] = req.Proof
	return nil
}

// SpeedProof is the latest proof committed for node id, if any.
func (f *FSM) SpeedProof(id string) (SpeedProof, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.state.SpeedProofs[id]
	return p, ok
}

// RecordSpeedProof commits p as this leader's: By and Time are set here. It fails with
// ErrNotLeader on any other node (a proof is never forwarded).
func (c *Consensus) RecordSpeedProof(ctx context.Context, p SpeedProof) error {
	if !c.IsLeader() {
		return ErrNotLeader
	}
	p.By, p.Time = c.host.ID().String(), now()
	if err := p.validate(); err != nil {
		return err
	}
	res, err := c.propose(ctx, SpeedProofType|IgnoreUnknownTypeFlag, SpeedProofRequest{Proof: p})
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}

package testnet

import (
	"encoding/json"
	"fmt"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// Summary is what `meshnode testnet run` reports about a finished job; its JSON form is
// the last line of `-o json`.
type Summary struct {
	Event string `json:"event"` // always "summary"
	Job   string `json:"job"`
	// Status is the job's final status (done, failed, cancelled) or where it stopped.
	Status string        `json:"status"`
	Nodes  []SummaryNode `json:"nodes"`
	// PlanEpoch and Strategy identify the plan the layer map comes from.
	PlanEpoch uint64           `json:"plan_epoch"`
	Strategy  jobspec.Strategy `json:"strategy,omitempty"`
	// StepTimeS is the mean wall time of a training step, TokensPerSec the job's
	// throughput over all replicas.
	StepTimeS    float64 `json:"step_time_s"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	// BytesPerStep is the data-plane payload the engine reported sending per step;
	// WireBytesPerStep is what crossed the emulated links (relays), QUIC overhead and
	// probes included; PredictedBytesPerStep is the plan's estimate.
	BytesPerStep          float64 `json:"bytes_per_step"`
	WireBytesPerStep      float64 `json:"wire_bytes_per_step,omitempty"`
	PredictedBytesPerStep float64 `json:"predicted_bytes_per_step"`
	PredictedStepTimeS    float64 `json:"predicted_step_time_s"`
	Steps                 int     `json:"steps"`
	// InitialValLoss is the untrained model's validation loss (step 0); FinalValLoss the
	// last evaluation's. Null when the job reported none.
	InitialValLoss *float64 `json:"initial_val_loss"`
	FinalValLoss   *float64 `json:"final_val_loss"`
}

// SummaryNode is one node of a Summary: its emulated slowdown, what it measured, and the
// layers the plan gave it as [first, last) ranges (one per stage it holds).
type SummaryNode struct {
	Name       string  `json:"name"`
	ID         string  `json:"id"`
	Region     string  `json:"region"`
	Slowdown   float64 `json:"slowdown"`
	GemmGFLOPS float64 `json:"gemm_gflops"`
	// TrainGFLOPS is the node's measured training rate, what the balancer planned with.
	TrainGFLOPS float64  `json:"train_gflops"`
	Layers      [][2]int `json:"layers"`
}

// Summarize builds the summary of job from its detail, the nodes' states and the profiles
// the nodes reported (by node ID; a missing one leaves gemm_gflops 0).
func Summarize(job consensus.JobDetail, nodes []NodeState, peers map[string]api.Peer) Summary {
	s := Summary{Event: "summary", Job: job.ID, Status: string(job.Status), Nodes: []SummaryNode{}, Steps: job.Progress.Step}
	plan := decodePlan(job.Plan)
	if job.Plan != nil {
		s.PlanEpoch = job.Plan.Epoch
	}
	s.Strategy = plan.Strategy
	s.PredictedStepTimeS = plan.PredictedStepS
	s.PredictedBytesPerStep = predictedBytes(plan)
	for _, n := range nodes {
		sn := SummaryNode{Name: n.Name, ID: n.ID, Region: n.Region, Slowdown: n.Slowdown, Layers: [][2]int{}}
		if p, ok := peers[n.ID]; ok && p.Profile != nil {
			sn.GemmGFLOPS, sn.TrainGFLOPS = p.Profile.GemmGFLOPS, p.Profile.TrainGFLOPS
		}
		for _, r := range plan.Replicas {
			for _, st := range r {
				if st.Node == n.ID {
					sn.Layers = append(sn.Layers, [2]int{st.First, st.Last})
				}
			}
		}
		s.Nodes = append(s.Nodes, sn)
	}
	s.InitialValLoss, s.FinalValLoss = valLosses(job.Progress.Samples)
	s.StepTimeS, s.TokensPerSec, s.BytesPerStep = rates(job.Progress.Samples)
	return s
}

// decodePlan reads the node's plan (scheduler.JobPlan) from a plan epoch; a missing or
// unreadable plan gives an empty one.
func decodePlan(pe *consensus.PlanEpoch) scheduler.JobPlan {
	var p scheduler.JobPlan
	if pe != nil && len(pe.Plan) > 0 {
		_ = json.Unmarshal(pe.Plan, &p)
	}
	return p
}

// predictedBytes is the traffic per step the balancer predicted for the plan, re-derived
// from the plan's recorded inputs (planning is a pure function); 0 when they are missing.
func predictedBytes(p scheduler.JobPlan) float64 {
	if len(p.Inputs.Snapshot.Nodes) == 0 {
		return 0
	}
	bp, err := p.Inputs.Replan()
	if err != nil {
		return 0
	}
	var sum float64
	for _, l := range bp.LinkBytes {
		sum += l.Bytes
	}
	return sum
}

func valLosses(samples []consensus.ProgressSample) (first, last *float64) {
	for i := range samples {
		if v := samples[i].ValLoss; v != nil {
			if first == nil {
				first = v
			}
			last = v
		}
	}
	return first, last
}

// rates derives step time, throughput and bytes per step from the progress samples:
// differences between the first and the last sample of the latest plan epoch, so that
// start-up and replanning pauses do not count.
func rates(samples []consensus.ProgressSample) (stepTime, tokensPerSec, bytesPerStep float64) {
	if len(samples) == 0 {
		return 0, 0, 0
	}
	last := samples[len(samples)-1]
	first := last
	for i := len(samples) - 1; i >= 0 && samples[i].Epoch == last.Epoch; i-- {
		first = samples[i]
	}
	tokensPerSec = last.TokensPerSec
	var n, sum float64
	for _, x := range samples {
		if x.TokensPerSec > 0 {
			n, sum = n+1, sum+x.TokensPerSec
		}
	}
	if n > 0 {
		tokensPerSec = sum / n
	}
	if d := last.Step - first.Step; d > 0 {
		stepTime = last.Time.Sub(first.Time).Seconds() / float64(d)
		bytesPerStep = float64(last.BytesSent-min(first.BytesSent, last.BytesSent)) / float64(d)
	} else if last.Step > 0 {
		bytesPerStep = float64(last.BytesSent) / float64(last.Step)
	}
	return stepTime, tokensPerSec, bytesPerStep
}

// LayerMap renders a node's layer ranges for people: "0–2, 4–5" (inclusive), or "—".
func LayerMap(ranges [][2]int) string {
	if len(ranges) == 0 {
		return "—"
	}
	out := ""
	for i, r := range ranges {
		if i > 0 {
			out += ", "
		}
		if r[1]-r[0] == 1 {
			out += fmt.Sprint(r[0])
		} else {
			out += fmt.Sprintf("%d–%d", r[0], r[1]-1)
		}
	}
	return out
}

package testnet

import (
	"encoding/json"
	"fmt"
	"strings"

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
	// ModelStateBytes is the model's training state (weights, gradients and AdamW
	// moments, as the balancer costs them) that a node holding it alone would need before
	// any activation; 0 without the plan's inputs.
	ModelStateBytes int64 `json:"model_state_bytes,omitempty"`
	// Split says what the plan cut and why: whether any node could hold the model alone
	// (the largest memory budget against ModelStateBytes) and what bound the plan.
	Split string `json:"split,omitempty"`
	// Reason is the balancer's reason for the plan's layout (a recalibrating epoch keeps
	// the layout, so its own reason is skipped).
	Reason string `json:"reason,omitempty"`
	// InitialValLoss is the untrained model's validation loss (step 0); FinalValLoss the
	// last evaluation's. Null when the job reported none.
	InitialValLoss *float64 `json:"initial_val_loss"`
	FinalValLoss   *float64 `json:"final_val_loss"`
	// Epochs are the job's plan epochs as the follower saw them: each one's predicted
	// against its measured step time (empty when the job was not followed).
	Epochs []EpochStep `json:"epochs,omitempty"`
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
	TrainGFLOPS float64 `json:"train_gflops"`
	// TrainMicroGFLOPS is its training rate in one-sequence passes, what it is priced at
	// on one-sequence micro-batches (docs/balancer.md, "Micro-batch size"); 0: not measured.
	TrainMicroGFLOPS float64  `json:"train_micro_gflops,omitempty"`
	Layers           [][2]int `json:"layers"`
	// MemoryBudgetBytes is the memory the node offered to training (its profile's).
	MemoryBudgetBytes uint64 `json:"memory_budget_bytes,omitempty"`
	// Replica is the plan replica the node's stage belongs to, from 1; 0: no stage.
	Replica int `json:"replica,omitempty"`
	// Phases are the node's own newest phase times per step (compute, transfer, bubble,
	// sync) in the newest epoch reported; nil when it reported none.
	Phases *consensus.StageTimes `json:"phases,omitempty"`
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
			sn.GemmGFLOPS, sn.TrainGFLOPS, sn.TrainMicroGFLOPS = p.Profile.GemmGFLOPS, p.Profile.TrainGFLOPS, p.Profile.TrainMicroGFLOPS
			sn.MemoryBudgetBytes = p.Profile.MemoryBudgetBytes
		}
		for ri, r := range plan.Replicas {
			for _, st := range r {
				if st.Node == n.ID {
					sn.Layers = append(sn.Layers, [2]int{st.First, st.Last})
					sn.Replica = ri + 1
				}
			}
		}
		for i := range job.Progress.Stages {
			if st := job.Progress.Stages[i]; st.Node == n.ID {
				sn.Phases = &st
			}
		}
		s.Nodes = append(s.Nodes, sn)
	}
	for _, l := range plan.Inputs.Job.Layers {
		s.ModelStateBytes += l.StaticBytes()
	}
	s.Reason = layoutReason(job, plan)
	s.Split = s.splitText(len(plan.Replicas))
	s.InitialValLoss, s.FinalValLoss = valLosses(job.Progress.Samples)
	s.StepTimeS, s.TokensPerSec, s.BytesPerStep = rates(job.Progress.Samples)
	return s
}

// recalibratedPrefix starts the reason of a plan epoch that only recalibrated its
// prediction (scheduler's recalibrate): the layout is an earlier epoch's.
const recalibratedPrefix = "recalibrated: "

// layoutReason is the balancer's reason for the current layout: the current plan's, or
// for a recalibrating epoch the newest plan event's that set a layout.
func layoutReason(job consensus.JobDetail, plan scheduler.JobPlan) string {
	if !strings.HasPrefix(plan.Reason, recalibratedPrefix) {
		return plan.Reason
	}
	for i := len(job.Events) - 1; i >= 0; i-- {
		ev := job.Events[i]
		if ev.Kind == jobspec.EventPlan && !strings.Contains(ev.Message, recalibratedPrefix) {
			return strings.TrimPrefix(ev.Message, "plan set ")
		}
	}
	return ""
}

// splitText says whether a node could hold the model alone, and so why the plan cut it.
func (s Summary) splitText(replicas int) string {
	var big *SummaryNode
	holders := 0
	for i, n := range s.Nodes {
		if big == nil || n.MemoryBudgetBytes > big.MemoryBudgetBytes {
			big = &s.Nodes[i]
		}
		if len(n.Layers) > 0 {
			holders++
		}
	}
	if big == nil || s.ModelStateBytes == 0 || big.MemoryBudgetBytes == 0 {
		return ""
	}
	layout := fmt.Sprintf("%d nodes hold layers in %d replica(s)", holders, replicas)
	if uint64(s.ModelStateBytes) > big.MemoryBudgetBytes {
		return fmt.Sprintf("no node could hold the model alone: its weights, gradients and AdamW moments need %s, and the largest budget, %s's, is %s; %s",
			mib(uint64(s.ModelStateBytes)), big.Name, mib(big.MemoryBudgetBytes), layout)
	}
	return fmt.Sprintf("%s could hold the model alone (%s of its %s); %s, the balancer's choice for speed",
		big.Name, mib(uint64(s.ModelStateBytes)), mib(big.MemoryBudgetBytes), layout)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

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

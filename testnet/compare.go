package testnet

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// A Variant is one way of running a job that `meshnode testnet run --compare` measures:
// the job spec with its parallel section forced one way (or left to the planner).
type Variant struct {
	Name string
	// Doc says what the variant forces, for the help text and the docs.
	Doc string
	// Apply rewrites the base spec's parallel section.
	Apply func(*jobspec.Parallel)
}

// Variants are the comparison's variants, in their default order: the planner's choice
// (the base job as submitted), every-step sync data parallelism over two replicas, one
// pipeline over the nodes, DiLoCo over two replicas, and streaming DiLoCo over two
// replicas with two fragments.
func Variants() []Variant {
	fixed := func(n int, sync jobspec.Sync) func(*jobspec.Parallel) {
		return func(p *jobspec.Parallel) {
			p.Replicas, p.Stages, p.Sync = jobspec.AutoInt{N: n}, jobspec.Auto(), sync
			if sync == jobspec.SyncStreaming {
				p.Fragments = max(p.Fragments, 2)
			}
		}
	}
	return []Variant{
		{Name: "planner", Doc: "the job as given: the planner chooses replicas and stages", Apply: func(*jobspec.Parallel) {}},
		{Name: "sync", Doc: "parallel.replicas: 2, parallel.sync: sync (all-reduce every step)", Apply: fixed(2, jobspec.SyncEveryStep)},
		{Name: "pipeline", Doc: "parallel.replicas: 1 (one pipeline, nothing to synchronise)", Apply: fixed(1, jobspec.SyncEveryStep)},
		{Name: "diloco", Doc: "parallel.replicas: 2, parallel.sync: diloco", Apply: fixed(2, jobspec.SyncDiLoCo)},
		{Name: "streaming", Doc: "parallel.replicas: 2, parallel.sync: streaming, parallel.fragments: 2", Apply: fixed(2, jobspec.SyncStreaming)},
	}
}

// VariantsByName returns the named variants in the given order; an unknown or repeated
// name is an error naming it.
func VariantsByName(names []string) ([]Variant, error) {
	all := map[string]Variant{}
	var known []string
	for _, v := range Variants() {
		all[v.Name] = v
		known = append(known, v.Name)
	}
	var out []Variant
	seen := map[string]bool{}
	for _, n := range names {
		v, ok := all[strings.TrimSpace(n)]
		switch {
		case !ok:
			return nil, fmt.Errorf("unknown variant %q (known: %s)", n, strings.Join(known, ", "))
		case seen[v.Name]:
			return nil, fmt.Errorf("variant %q named twice", v.Name)
		}
		seen[v.Name] = true
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no variant named (known: %s)", strings.Join(known, ", "))
	}
	return out, nil
}

// LossPoint is one evaluation of a run: seconds since the job was submitted, the step,
// and the validation loss.
type LossPoint struct {
	T    float64 `json:"t_s"`
	Step int     `json:"step"`
	Loss float64 `json:"val_loss"`
}

// Trial is one variant's job on a fresh testnet, cut at the wall-clock budget: one point of
// a time-to-loss comparison.
type Trial struct {
	Variant string `json:"variant"`
	Round   int    `json:"round"`
	// Plan describes the plan the job ran: replicas × stages and the sync mode.
	Plan      string  `json:"plan"`
	StepTimeS float64 `json:"step_time_s"`
	// Steps is the last step the job reported within the budget.
	Steps int `json:"steps"`
	// Curve is every evaluation within the budget, in order.
	Curve []LossPoint `json:"curve"`
	// Status is the job's status when the budget ended ("running" unless it ended sooner).
	Status string `json:"status"`
}

// TrialFromJob extracts a Trial from a job's detail and the progress samples collected while
// it ran (the detail's history is bounded; samples may repeat it): its evaluations within
// budget of submitted, its plan, and its step time (Summarize's, over the latest epoch).
func TrialFromJob(variant string, round int, job consensus.JobDetail, samples []consensus.ProgressSample, submitted time.Time, budget time.Duration) Trial {
	r := Trial{Variant: variant, Round: round, Status: string(job.Status), Curve: []LossPoint{}}
	var within []consensus.ProgressSample
	for _, s := range samples {
		if s.Time.Sub(submitted) <= budget {
			within = append(within, s)
		}
	}
	r.StepTimeS, _, _ = rates(within)
	r.Plan = describePlan(job)
	seen := map[[2]int]bool{}
	for _, s := range within {
		if k := [2]int{int(s.Epoch), s.Step}; s.ValLoss != nil && seen[k] {
			continue
		} else if s.ValLoss != nil {
			seen[k] = true
		}
		t := s.Time.Sub(submitted).Seconds()
		r.Steps = max(r.Steps, s.Step)
		if s.ValLoss != nil {
			r.Curve = append(r.Curve, LossPoint{T: t, Step: s.Step, Loss: *s.ValLoss})
		}
	}
	sort.SliceStable(r.Curve, func(i, j int) bool { return r.Curve[i].T < r.Curve[j].T })
	return r
}

// describePlan is "R×S mode": replicas, the stages of each, the sync mode ("1×3" alone for
// one replica, which does not synchronise).
func describePlan(job consensus.JobDetail) string {
	p := decodePlan(job.Plan)
	if len(p.Replicas) == 0 {
		return "—"
	}
	var stages []string
	for _, r := range p.Replicas {
		stages = append(stages, fmt.Sprint(len(r)))
	}
	s := fmt.Sprintf("%d×%s", len(p.Replicas), strings.Join(stages, "+"))
	if len(p.Replicas) > 1 {
		s += " " + string(job.Spec.Parallel.Sync)
	}
	return s
}

// FinalLoss is the last evaluation's loss, NaN without one.
func (r Trial) FinalLoss() float64 {
	if len(r.Curve) == 0 {
		return math.NaN()
	}
	return r.Curve[len(r.Curve)-1].Loss
}

// BestLoss is the lowest evaluation's loss, NaN without one.
func (r Trial) BestLoss() float64 {
	best := math.NaN()
	for _, p := range r.Curve {
		if math.IsNaN(best) || p.Loss < best {
			best = p.Loss
		}
	}
	return best
}

// TimeTo is the wall time of the first evaluation at or below loss (NaN if none), read
// off the evaluations themselves: no interpolation between them.
func (r Trial) TimeTo(loss float64) float64 {
	for _, p := range r.Curve {
		if p.Loss <= loss {
			return p.T
		}
	}
	return math.NaN()
}

// CommonTarget is the default target loss of a comparison: the highest of the runs' best
// losses, the lowest loss every run reached (NaN when a run has no evaluation).
func CommonTarget(runs []Trial) float64 {
	t := math.Inf(-1)
	for _, r := range runs {
		b := r.BestLoss()
		if math.IsNaN(b) {
			return math.NaN()
		}
		t = math.Max(t, b)
	}
	if math.IsInf(t, -1) {
		return math.NaN()
	}
	return t
}

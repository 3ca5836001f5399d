package balancer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// The time-to-loss model (docs/balancer.md, "Time to loss").
//
// Plans differ in what a step buys, not only in what it costs. Every plan trains on the
// job's batch B per step, split over the replicas. With every-step sync that is the same
// arithmetic whatever the split, but DiLoCo and streaming DiLoCo replicas train apart for
// inner_steps steps, each on its share b = B/R, and a step of AdamW on b sequences
// progresses less than one on B. The planner therefore scores a plan by its time per step
// of progress, step / worth, where worth is how many steps of training on the whole batch
// one step of the plan is worth:
//
//	worth = 1                                       every-step sync, or one replica
//	worth = ((1 + κ·(R−1)) / R)^β                   R DiLoCo or streaming replicas
//
// β is the batch exponent (a step on b sequences is worth (b/B)^β steps on B: 1 when only
// tokens count, 0 when only steps count) and κ the share of the other replicas' batches
// that DiLoCo's averaging recovers (0: R replicas progress like one of them, 1: like
// every-step sync). Both are derived from validation-loss curves measured once for the
// default model shape (measuredCurves), by the steps each curve takes to reach the same
// losses. A shape nobody measured is judged by step time alone (worth 1), as before the
// model: the planner does not guess.

// ProgressModel is what a step of a plan is worth, in steps of training on the whole batch.
type ProgressModel struct {
	// BatchExponent is β: a replica step on b of the batch's B sequences is worth (b/B)^β
	// steps on B.
	BatchExponent float64 `json:"batch_exponent"`
	// DiLoCoGain and StreamingGain are κ for jobspec.SyncDiLoCo and jobspec.SyncStreaming:
	// R replicas of b sequences progress like one of b·(1 + κ·(R−1)).
	DiLoCoGain    float64 `json:"diloco_gain"`
	StreamingGain float64 `json:"streaming_gain"`
}

// Worth is how many steps of training on the whole batch one step of a plan with the
// given replica batch shares is worth under the sync mode ("" means DiLoCo).
func (m ProgressModel) Worth(mode jobspec.Sync, shares []int) float64 {
	R := len(shares)
	if R <= 1 || mode == jobspec.SyncEveryStep {
		return 1
	}
	kappa := m.DiLoCoGain
	if mode == jobspec.SyncStreaming {
		kappa = m.StreamingGain
	}
	r := float64(R)
	return math.Pow((1+kappa*(r-1))/r, m.BatchExponent)
}

// DefaultProgress is the model the planner uses for jobs of the measured model shape
// (MeasuredShape), derived from measuredCurves.
var DefaultProgress = mustDeriveProgress(measuredCurves)

// MeasuredShape is the model shape measuredCurves were measured on: the default GPT.
var MeasuredShape = model.Config{Layers: 4, DModel: 128, Heads: 4, Context: 128, Vocab: 256}

var measuredLayers = MeasuredShape.LayerCosts()

// progressFor is the progress model for the job's model shape; ok is false for a shape
// nobody measured, which the planner then judges by step time alone (every plan worth 1).
func progressFor(job Job) (m ProgressModel, ok bool) {
	if slices.Equal(job.Layers, measuredLayers) {
		return DefaultProgress, true
	}
	return ProgressModel{}, false
}

// LossCurve is a measured validation-loss curve: Replicas replicas of Batch sequences each,
// synchronised by Mode (one replica: plain training), evaluated at Points (step, loss).
type LossCurve struct {
	Name     string       `json:"name"`
	Batch    int          `json:"batch"`
	Replicas int          `json:"replicas"`
	Mode     jobspec.Sync `json:"mode"`
	Points   [][2]float64 `json:"points"`
}

// stepsTo is the (interpolated) step at which the curve's running minimum first reaches
// loss; ok is false when it never does.
func (c LossCurve) stepsTo(loss float64) (float64, bool) {
	prevS, prevL := 0.0, math.Inf(1)
	for _, p := range c.Points {
		s, l := p[0], math.Min(p[1], prevL)
		if l <= loss {
			if math.IsInf(prevL, 1) || prevL == l {
				return s, true
			}
			return prevS + (s-prevS)*(prevL-loss)/(prevL-l), true
		}
		prevS, prevL = s, l
	}
	return 0, false
}

// DeriveProgress fits a ProgressModel to curves: one single-replica curve with the largest
// batch is the reference B; β is the mean of ln(steps_B/steps_b)/ln(b/B) over the other
// single-replica curves and the shared losses; κ for each multi-replica curve of R replicas
// of B/R sequences is the one whose predicted worth gives its measured steps ratio. The
// shared losses are 8 levels from the reference's third evaluation (past the warm-up)
// down to the highest loss every curve reaches.
func DeriveProgress(curves []LossCurve) (ProgressModel, error) {
	ref, ok := referenceCurve(curves)
	if !ok {
		return ProgressModel{}, errors.New("progress model: no single-replica curve with at least two points")
	}
	levels, err := sharedLevels(ref, curves)
	if err != nil {
		return ProgressModel{}, err
	}
	ratio := func(c LossCurve) float64 { // geometric mean of steps_ref / steps_c
		sum := 0.0
		for _, l := range levels {
			a, _ := ref.stepsTo(l)
			b, _ := c.stepsTo(l)
			sum += math.Log(a / b)
		}
		return math.Exp(sum / float64(len(levels)))
	}
	var m ProgressModel
	n := 0
	for _, c := range curves {
		if c.Replicas <= 1 && c.Batch < ref.Batch {
			m.BatchExponent += math.Log(ratio(c)) / math.Log(float64(c.Batch)/float64(ref.Batch))
			n++
		}
	}
	if n == 0 {
		return m, errors.New("progress model: no single-replica curve with a smaller batch than the reference")
	}
	m.BatchExponent = math.Max(0, m.BatchExponent/float64(n))
	for _, c := range curves {
		if c.Replicas <= 1 {
			continue
		}
		if c.Replicas*c.Batch != ref.Batch {
			return m, fmt.Errorf("progress model: curve %q: %d replicas × %d sequences is not the reference batch %d", c.Name, c.Replicas, c.Batch, ref.Batch)
		}
		k := gainFor(ratio(c), m.BatchExponent, float64(c.Replicas))
		switch c.Mode {
		case jobspec.SyncStreaming:
			m.StreamingGain = k
		case jobspec.SyncDiLoCo, "":
			m.DiLoCoGain = k
		}
	}
	return m, nil
}

// gainFor solves ((1 + κ(R−1))/R)^β = ratio for κ, clamped to [0, 1].
func gainFor(ratio, beta, R float64) float64 {
	if beta <= 0 {
		return 1
	}
	k := (R*math.Pow(ratio, 1/beta) - 1) / (R - 1)
	return math.Min(1, math.Max(0, k))
}

func referenceCurve(curves []LossCurve) (LossCurve, bool) {
	var ref LossCurve
	found := false
	for _, c := range curves {
		if c.Replicas <= 1 && len(c.Points) >= 2 && (!found || c.Batch > ref.Batch) {
			ref, found = c, true
		}
	}
	return ref, found
}

// sharedLevels are the losses the comparison uses (see DeriveProgress).
func sharedLevels(ref LossCurve, curves []LossCurve) ([]float64, error) {
	pts := append([][2]float64(nil), ref.Points...)
	sort.Slice(pts, func(i, j int) bool { return pts[i][0] < pts[j][0] })
	hi := pts[min(2, len(pts)-1)][1]
	lo := math.Inf(-1)
	for _, c := range curves {
		best := math.Inf(1)
		for _, p := range c.Points {
			best = math.Min(best, p[1])
		}
		lo = math.Max(lo, best)
	}
	if !(lo < hi) {
		return nil, fmt.Errorf("progress model: the curves share no loss range below %.4f (the highest final loss is %.4f)", hi, lo)
	}
	var out []float64
	for i := range 8 {
		out = append(out, hi-(hi-lo)*float64(i)/7)
	}
	return out, nil
}

func mustDeriveProgress(curves []LossCurve) ProgressModel {
	m, err := DeriveProgress(curves)
	if err != nil {
		panic(err)
	}
	return m
}

// worth is the time-to-loss worth of a draft's step under the job's sync mode: 1 for a
// model shape without a measured progress model.
func (in *instance) worth(d draft) float64 {
	m, ok := progressFor(in.job)
	if !ok {
		return 1
	}
	shares := make([]int, len(d.replicas))
	for i, r := range d.replicas {
		shares[i] = r.batch
	}
	return m.Worth(in.job.Sync.Mode, shares)
}

// timeToLoss is the planner's score of a draft whose step takes step seconds: seconds per
// step of progress of training on the whole batch.
func (in *instance) timeToLoss(d draft, step float64) float64 { return step / in.worth(d) }

package balancer

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// planTiers plans with the job's memory choices (tiers): the first allowance under which a
// plan fits wins; when none does, the error is the first tier's (what the job needs without
// the techniques it leaves to auto). The reason of a plan that needed a later tier names the
// technique and what failed without it.
func (in *instance) planTiers(opts Options) (Plan, error) {
	var firstErr error
	offloadTried := false
	for i, a := range tiers(in.job) {
		offloadTried = offloadTried || a.offload
		t := *in
		t.allowRecompute, t.allowOffload = a.recompute, a.offload
		p, err := t.plan(opts)
		if err == nil {
			if i > 0 {
				p.Reason = t.techniques(p) + " (without: " + firstErr.Error() + "); " + p.Reason
			}
			return p, nil
		}
		if !errors.Is(err, ErrInfeasible) {
			return Plan{}, err
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if note := in.diskNote(); offloadTried && note != "" {
		return Plan{}, fmt.Errorf("%w; %s", firstErr, note)
	}
	return Plan{}, firstErr
}

// diskNote names the nodes whose disk could not take the model's whole training state
// offloaded, or "" when none.
func (in *instance) diskNote() string {
	var short []string
	for nd, room := range in.diskRoom {
		if room < in.static[in.L] && len(short) < 3 {
			short = append(short, fmt.Sprintf("%s has room for %s of the %s needed", in.ids[nd], gib(room), gib(in.static[in.L])))
		}
	}
	if len(short) == 0 {
		return ""
	}
	return "offload is bounded by each node's free disk less max(1 GiB, 10%): " + strings.Join(short, ", ")
}

// techniques names what a plan's stages use to fit.
func (in *instance) techniques(p Plan) string {
	rc, off := 0, 0
	for _, r := range p.Replicas {
		for _, s := range r.Stages {
			if s.Recompute {
				rc++
			}
			if s.OffloadBytes > 0 {
				off++
			}
		}
	}
	switch {
	case off > 0 && rc > 0:
		return fmt.Sprintf("recomputing activations on %d stage(s) and offloading training state on %d", rc, off)
	case off > 0:
		return fmt.Sprintf("offloading training state on %d stage(s)", off)
	}
	return fmt.Sprintf("recomputing activations on %d stage(s)", rc)
}

// rangeMax answers the maximum of a fixed slice over [j, e) in constant time (a sparse
// table).
type rangeMax [][]float64

func newRangeMax(v []float64) rangeMax {
	t := rangeMax{append([]float64(nil), v...)}
	for w := 1; 2*w <= len(v); w *= 2 {
		prev, next := t[len(t)-1], make([]float64, len(v)-2*w+1)
		for i := range next {
			next[i] = max(prev[i], prev[i+w])
		}
		t = append(t, next)
	}
	return t
}

// of is the maximum over [j, e), e > j.
func (t rangeMax) of(j, e int) float64 {
	k := bits.Len(uint(e-j)) - 1
	return max(t[k][j], t[k][e-(1<<k)])
}

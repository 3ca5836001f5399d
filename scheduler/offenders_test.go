package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestOffenderIsLeftOutOfTheNextPlan: a running job whose event log names a plan member an
// offender is replanned without it, and a later plan of the job never takes it back,
// though it is alive.
func TestOffenderIsLeftOutOfTheNextPlan(t *testing.T) {
	diloco := spec()
	diloco.Parallel.Stages, diloco.Parallel.Replicas, diloco.Parallel.Sync = jobspec.Fixed(1), jobspec.Auto(), jobspec.SyncDiLoCo
	j := running(t, diloco, abc)
	bad := j.Plan.Replicas[1][0].Node
	j.Events = append(j.Events, Event{Kind: jobspec.EventOffender, Epoch: j.Epoch, Step: 9,
		Message: jobspec.OffenderMessage(bad, "dropped in 3 consecutive syncs")})
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: abc, JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	d := decision(t, h, s)
	if d.Plan == nil || d.Plan.Has(bad) {
		t.Fatalf("decision %s on %v: want a plan without the offender %s", d.Kind, d.Plan, bad)
	}
	if d.Kind != DecisionReplan {
		t.Errorf("decision %s, want a replan", d.Kind)
	}
	if got := Offenders(h.JobList[0].Events); !got[bad] || len(got) != 1 {
		t.Errorf("offenders %v, want only %s", got, bad)
	}
}

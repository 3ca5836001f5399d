package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// offenderJob is a running three-replica DiLoCo job and the node of its second replica.
func offenderJob(t *testing.T) (Job, string) {
	t.Helper()
	diloco := spec()
	diloco.Parallel.Stages, diloco.Parallel.Replicas, diloco.Parallel.Sync = jobspec.Fixed(1), jobspec.Fixed(3), jobspec.SyncDiLoCo
	j := running(t, diloco, abc)
	if len(j.Plan.Replicas) < 3 {
		t.Fatalf("the test wants three replicas, the plan has %d", len(j.Plan.Replicas))
	}
	return j, j.Plan.Replicas[1][0].Node
}

// named is j with an offender event naming bad, recorded by each of reporters.
func named(j Job, bad string, reporters ...string) Job {
	for _, by := range reporters {
		j.Events = append(j.Events, Event{Kind: jobspec.EventOffender, Epoch: j.Epoch, Step: 9, By: by,
			Message: jobspec.OffenderMessage(bad, "dropped in 3 consecutive syncs")})
	}
	return j
}

// TestOffenderIsLeftOutOfTheNextPlan: a running job whose event log has a majority of its
// plan (the two honest replicas) naming a member an offender is replanned without it, and
// a later plan of the job never takes it back, though it is alive.
func TestOffenderIsLeftOutOfTheNextPlan(t *testing.T) {
	j, bad := offenderJob(t)
	j = named(j, bad, j.Plan.Replicas[0][0].Node, j.Plan.Replicas[2][0].Node)
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: abc, JobList: []Job{j}, Clock: t0}
	d := decision(t, h, New(Config{}))
	if d.Plan == nil || d.Plan.Has(bad) {
		t.Fatalf("decision %s on %v: want a plan without the offender %s", d.Kind, d.Plan, bad)
	}
	if d.Kind != DecisionReplan {
		t.Errorf("decision %s, want a replan", d.Kind)
	}
	next := j
	next.Plan, next.Epoch = d.Plan, j.Epoch+1
	if got := Offenders(next); !got[bad] || len(got) != 1 {
		t.Errorf("offenders under the next plan %v, want only %s", got, bad)
	}
}

// TestOneMemberCannotExcludeAnother: an admitted member that names an honest node an
// offender, however often, or that names itself, or an event without an authenticated
// reporter, excludes nobody: it takes more than half of the plan.
func TestOneMemberCannotExcludeAnother(t *testing.T) {
	j, honest := offenderJob(t)
	liar := j.Plan.Replicas[0][0].Node
	for name, job := range map[string]Job{
		"one liar, three times": named(j, honest, liar, liar, liar),
		"self-accusation":       named(named(j, honest, honest), honest, liar),
		"no reporter":           named(j, honest, "", ""),
	} {
		if got := Offenders(job); len(got) != 0 {
			t.Errorf("%s: offenders %v, want none", name, got)
		}
		h := &Harness{SelfID: liar, MemberList: abc, JobList: []Job{job}, Clock: t0}
		for _, d := range New(Config{}).Evaluate(h) {
			if d.Plan != nil && !d.Plan.Has(honest) {
				t.Errorf("%s: decision %s plans without %s", name, d.Kind, honest)
			}
		}
	}
}

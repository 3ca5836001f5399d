package scheduler

import (
	"slices"
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
	next.Epochs = []EpochPlan{{Epoch: j.Epoch, Plan: j.Plan}, {Epoch: next.Epoch, Plan: d.Plan}}
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

// fourReplicaJob is a running four-replica DiLoCo job on a, b, c and d.
func fourReplicaJob(t *testing.T) (Job, []Member) {
	t.Helper()
	diloco := spec()
	diloco.Parallel.Stages, diloco.Parallel.Replicas, diloco.Parallel.Sync = jobspec.Fixed(1), jobspec.Fixed(4), jobspec.SyncDiLoCo
	abcd := members("a", "b", "c", "d")
	j := running(t, diloco, abcd)
	if len(j.Plan.Replicas) != 4 {
		t.Fatalf("the test wants four replicas, the plan has %d", len(j.Plan.Replicas))
	}
	return j, abcd
}

// verdict is j with a leader's verdict on member, shipped by accuser.
func verdict(j Job, member, accuser string, convicted bool) Job {
	j.Verdicts = append(j.Verdicts, Verdict{Member: member, Accuser: accuser, Convicted: convicted, Epoch: j.Epoch, Step: 9, By: "leader"})
	return j
}

// TestVerifiedColludersAreLeftOut: two colluders of four, each named by the two honest
// members only (half of the plan, not more), stay on the reporters' word alone, and are
// left out of the next plan once a leader's verdict convicted them. That plan trains the
// honest pair on the job's whole batch, as the four replicas did (a new plan from a
// checkpoint, not the survivors going on in place with their old shares): what the
// parallel package's replay measurements take the leader to do (its replanning).
func TestVerifiedColludersAreLeftOut(t *testing.T) {
	j, abcd := fourReplicaJob(t)
	h0, h1, c0, c1 := j.Plan.Replicas[0][0].Node, j.Plan.Replicas[1][0].Node, j.Plan.Replicas[2][0].Node, j.Plan.Replicas[3][0].Node
	j = named(named(j, c0, h0, h1), c1, h0, h1)
	if got := Offenders(j); len(got) != 0 {
		t.Fatalf("offenders %v on half of the plan's word: want none without a verdict", got)
	}
	j = verdict(verdict(j, c0, h0, true), c1, h1, true)
	if got := Offenders(j); !got[c0] || !got[c1] || len(got) != 2 {
		t.Fatalf("offenders %v, want %s and %s", got, c0, c1)
	}
	h := &Harness{SelfID: h0, MemberList: abcd, JobList: []Job{j}, Clock: t0}
	d := decision(t, h, New(Config{}))
	if d.Plan == nil || d.Plan.Has(c0) || d.Plan.Has(c1) || !d.Plan.Has(h0) || !d.Plan.Has(h1) {
		t.Fatalf("decision %s on %v: want a plan of %s and %s only", d.Kind, d.Plan, h0, h1)
	}
	sum := func(b []int) (n int) {
		for _, x := range b {
			n += x
		}
		return n
	}
	if d.Kind != DecisionReplan || len(d.Plan.Batches) != 2 || sum(d.Plan.Batches) != j.Spec.Train.Batch || sum(j.Plan.Batches) != j.Spec.Train.Batch {
		t.Errorf("decision %s with batch shares %v (before: %v): want a replan of two replicas over the job's batch %d", d.Kind, d.Plan.Batches, j.Plan.Batches, j.Spec.Train.Batch)
	}
}

// TestLiarsWithoutEvidenceExcludeNobody: two colluders of four naming the two honest
// members (half of the plan) exclude nobody, and neither does a verdict that did not
// convict (the leader re-scored the evidence and the accused was not dropped).
func TestLiarsWithoutEvidenceExcludeNobody(t *testing.T) {
	j, abcd := fourReplicaJob(t)
	h0, h1, c0, c1 := j.Plan.Replicas[0][0].Node, j.Plan.Replicas[1][0].Node, j.Plan.Replicas[2][0].Node, j.Plan.Replicas[3][0].Node
	for name, job := range map[string]Job{
		"named by half":         named(named(j, h0, c0, c1), h1, c0, c1),
		"false evidence, twice": verdict(verdict(named(named(j, h0, c0, c1), h1, c0, c1), h0, c0, false), h1, c1, false),
		"unstamped verdict":     func() Job { k := verdict(j, h0, c0, true); k.Verdicts[0].By = ""; return k }(),
	} {
		if got := Offenders(job); len(got) != 0 {
			t.Errorf("%s: offenders %v, want none", name, got)
		}
		h := &Harness{SelfID: c0, MemberList: abcd, JobList: []Job{job}, Clock: t0}
		for _, d := range New(Config{}).Evaluate(h) {
			if d.Plan != nil && (!d.Plan.Has(h0) || !d.Plan.Has(h1)) {
				t.Errorf("%s: decision %s plans without an honest member: %v", name, d.Kind, d.Plan)
			}
		}
	}
}

// TestHalfNamingDoesNotAddUpAcrossPlans: two colluders of four name the two honest
// members, and the honest ones name them: half of the plan each way, so nobody is an
// offender on the count. Once a verdict convicts one colluder and the next plan has
// three nodes, the accusations made under the plan of four still count against that
// plan (need three), not against the plan of three (need two): before, every member of
// the testnet's colluder scenario became an offender and the job failed with no node
// left. The colluder left in the plan of three is an offender once both honest members
// name it there; the convicted colluder's accusations never count.
func TestHalfNamingDoesNotAddUpAcrossPlans(t *testing.T) {
	j, abcd := fourReplicaJob(t)
	h0, h1, c0, c1 := j.Plan.Replicas[0][0].Node, j.Plan.Replicas[1][0].Node, j.Plan.Replicas[2][0].Node, j.Plan.Replicas[3][0].Node
	j.Epochs = []EpochPlan{{Epoch: j.Epoch, Plan: j.Plan}}
	j = named(named(named(named(j, c0, h0, h1), c1, h0, h1), h0, c0, c1), h1, c0, c1)
	if got := Offenders(j); len(got) != 0 {
		t.Fatalf("offenders %v on half of the plan's word each way: want none", got)
	}
	j = verdict(j, c0, h0, true)
	h := &Harness{SelfID: h0, MemberList: abcd, JobList: []Job{j}, Clock: t0}
	d := decision(t, h, New(Config{}))
	if d.Plan == nil || d.Plan.Has(c0) || !d.Plan.Has(h0) || !d.Plan.Has(h1) {
		t.Fatalf("decision %s on %v: want a plan of the honest members without %s", d.Kind, d.Plan, c0)
	}
	three := *j.Plan // the plan of three the testnet's scenario ran next
	three.Replicas = slices.DeleteFunc(slices.Clone(three.Replicas), func(r []Stage) bool { return r[0].Node == c0 })
	next := j
	next.Plan, next.Epoch = &three, j.Epoch+1
	next.Epochs = append(next.Epochs, EpochPlan{Epoch: next.Epoch, Plan: &three})
	if got := Offenders(next); !got[c0] || len(got) != 1 {
		t.Fatalf("offenders under the plan of three %v, want only the convicted %s", got, c0)
	}
	next = named(named(next, h0, c1, c0), h1, c1, c0) // c1 and the convicted c0 go on naming
	if got := Offenders(next); !got[c0] || len(got) != 1 {
		t.Errorf("offenders %v after the colluders named the honest members again: want only %s", got, c0)
	}
	next = named(next, c1, h0, h1)
	if got := Offenders(next); !got[c0] || !got[c1] || len(got) != 2 {
		t.Errorf("offenders %v after both honest members named %s under the plan of three: want both colluders", got, c1)
	}
}

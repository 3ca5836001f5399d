package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestDefaultJobIsAudited: the default spec (parallel.audit auto) asking for three
// replicas on three equal nodes that hold the model is planned as three one-stage
// replicas, and the committed plan says it is audited, so its workers run at auto's rate
// (AuditRate); audit 0 plans the same nodes unaudited, and every-step sync is not audited
// by auto.
func TestDefaultJobIsAudited(t *testing.T) {
	ms := members("a", "b", "c")
	spec := jobspec.DefaultSpec()
	spec.Parallel.Replicas = jobspec.Fixed(3)
	jp, err := PlanJob(spec, ms, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jp.Replicas) != 3 || !jp.Audited || AuditRate(spec, jp) != jobspec.AutoAudit {
		t.Fatalf("default job: %d replicas, audited %v, rate %v; want three audited replicas at %v (%s)",
			len(jp.Replicas), jp.Audited, AuditRate(spec, jp), jobspec.AutoAudit, jp.Reason)
	}
	off := spec
	off.Parallel.Audit = jobspec.Pinned(0)
	if jp, err := PlanJob(off, ms, Config{}); err != nil || jp.Audited || AuditRate(off, jp) != 0 {
		t.Fatalf("audit 0: audited %v, rate %v (%v); want neither", jp.Audited, AuditRate(off, jp), err)
	}
	sync := spec
	sync.Parallel.Sync, sync.Parallel.Codec = jobspec.SyncEveryStep, jobspec.CodecNone
	if jp, err := PlanJob(sync, ms, Config{}); err != nil || jp.Audited || AuditRate(sync, jp) != 0 {
		t.Fatalf("every-step sync under auto: audited %v, rate %v (%v); want neither", jp.Audited, AuditRate(sync, jp), err)
	}
}

// TestAuditRate: what the workers of a plan audit at. A pinned rate is the job's, whatever
// the plan says (plans stored before Audited existed lack it); auto audits only a plan the
// planner marked audited.
func TestAuditRate(t *testing.T) {
	auto, pinned := jobspec.DefaultSpec(), jobspec.DefaultSpec()
	pinned.Parallel.Audit = jobspec.Pinned(2)
	for _, c := range []struct {
		spec    jobspec.Spec
		audited bool
		want    float64
	}{
		{auto, true, jobspec.AutoAudit},
		{auto, false, 0},
		{pinned, true, 2},
		{pinned, false, 2},
	} {
		if got := AuditRate(c.spec, JobPlan{Audited: c.audited}); got != c.want {
			t.Errorf("audit %v, plan audited %v: rate %v, want %v", c.spec.Parallel.Audit, c.audited, got, c.want)
		}
	}
}

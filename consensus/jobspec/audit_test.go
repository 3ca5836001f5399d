package jobspec

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAuditField: parallel.audit parses and validates where an audit can recompute a
// replica's work, defaults to "auto", and stays out of the JSON of a job stored with 0 (a
// job stored before the field existed reads as no audit).
func TestAuditField(t *testing.T) {
	s, err := Parse([]byte("parallel: {audit: 1.5, codec: none}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil || s.Parallel.Audit != Pinned(1.5) || s.ResolvedAudit() != 1.5 {
		t.Fatalf("audit %v: %v", s.Parallel.Audit, err)
	}
	d := DefaultSpec()
	if !d.Parallel.Audit.IsAuto || d.ResolvedAudit() != AutoAudit {
		t.Fatalf("default audit %v (resolved %v), want auto (%v)", d.Parallel.Audit, d.ResolvedAudit(), AutoAudit)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"audit":"auto"`) {
		t.Fatalf("the default job does not marshal audit auto: %s", b)
	}
	var old Spec
	if err := json.Unmarshal([]byte(`{"parallel":{"sync":"diloco","codec":"int8"}}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Parallel.Audit != Pinned(0) || old.ResolvedAudit() != 0 {
		t.Fatalf("a stored job without the field reads as audit %v (resolved %v), want 0", old.Parallel.Audit, old.ResolvedAudit())
	}
	d.Parallel.Audit = Pinned(0)
	if b, err = json.Marshal(d); err != nil || strings.Contains(string(b), "audit") {
		t.Fatalf("a job without audit marshals it: %s (%v)", b, err)
	}
}

// TestAutoAuditResolves: "auto" is AutoAudit for a DiLoCo job that can be audited and 0
// wherever a pinned rate would be refused or the engine could not audit (every-step sync
// too, by choice), never an error.
func TestAutoAuditResolves(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want float64
	}{
		{"", AutoAudit},
		{"parallel: {codec: none}", AutoAudit},
		{"parallel: {codec: fp16}", AutoAudit},
		{"parallel: {codec: topk}", 0},
		{"parallel: {sync: streaming}", 0},
		{"parallel: {sync: sync, codec: none}", 0},
		{"parallel: {sync: sync, codec: none}\nmemory: {zero: 1}", 0},
		{"data: {local: web}", 0},
		{"train: {lora: {rank: 4}}", 0},
		{"parallel: {audit: 0}", 0},
		{"parallel: {audit: 2, codec: none}", 2},
	} {
		s, err := Parse([]byte(c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if got := s.ResolvedAudit(); got != c.want {
			t.Errorf("%q: audit resolves to %v, want %v", c.yaml, got, c.want)
		}
	}
	// A sharded dataset (set at submission, from its manifest): each replica holds only
	// its own shards, so nobody could recompute another's work. auto resolves to 0 and a
	// pinned rate is refused, naming the field.
	s := DefaultSpec()
	s.Data.Blob, s.Data.TrainShards = strings.Repeat("ab", 32), 3
	if err := s.Validate(); err != nil || s.ResolvedAudit() != 0 {
		t.Errorf("sharded: %v, audit resolves to %v, want 0", err, s.ResolvedAudit())
	}
	s.Parallel.Audit = Pinned(1)
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "parallel.audit: needs a dataset every replica holds whole") {
		t.Errorf("sharded with audit 1: %v, want it refused", err)
	}
}

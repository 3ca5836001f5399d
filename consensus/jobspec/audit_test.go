package jobspec

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAuditField: parallel.audit parses and validates where an audit can recompute a
// replica's work, defaults to 0 and stays out of the JSON of a job that does not set it
// (a job stored before the field existed reads as no audit).
func TestAuditField(t *testing.T) {
	s, err := Parse([]byte("parallel: {audit: 1.5, codec: none}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil || s.Parallel.Audit != 1.5 {
		t.Fatalf("audit %v: %v", s.Parallel.Audit, err)
	}
	d := DefaultSpec()
	if d.Parallel.Audit != 0 {
		t.Fatalf("default audit %v, want 0", d.Parallel.Audit)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "audit") {
		t.Fatalf("a job without audit marshals it: %s", b)
	}
}

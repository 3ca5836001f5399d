package jobspec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestOuterStepsCountTheLastShortRound(t *testing.T) {
	for _, c := range []struct{ steps, inner, want int }{
		{600, 50, 12}, {601, 50, 13}, {49, 50, 1}, {50, 50, 1}, {6000, 30, 200}, {0, 50, 0}, {10, 0, 0},
	} {
		if got := OuterSteps(c.steps, c.inner); got != c.want {
			t.Errorf("OuterSteps(%d, %d) = %d, want %d", c.steps, c.inner, got, c.want)
		}
	}
}

// TestOuterAutoFollowsTheMeasuredTable: "auto" resolves to the row of docs/PERFORMANCE.md's
// grid for the job's outer steps (train.steps ÷ parallel.inner_steps, rounded up).
func TestOuterAutoFollowsTheMeasuredTable(t *testing.T) {
	for _, c := range []struct {
		steps, inner int
		lr, momentum float64
	}{
		{1, 50, 0.7, 0.5}, {180, 30, 0.7, 0.5}, {240, 30, 0.7, 0.5}, // up to 8 outer steps
		{241, 30, 1.0, 0.5}, {600, 50, 1.0, 0.5}, {3000, 30, 1.0, 0.5}, {4230, 30, 1.0, 0.5}, // 9, 12, 100, 141
		{4231, 30, 0.7, 0.9}, {6000, 30, 0.7, 0.9}, {300, 1, 0.7, 0.9}, // 142, 200; every-step sync: 300
	} {
		s := DefaultSpec()
		s.Train.Steps, s.Parallel.InnerSteps = c.steps, c.inner
		if lr, m := s.Outer(); lr != c.lr || m != c.momentum {
			t.Errorf("%d steps of %d: outer %v/%v, want %v/%v", c.steps, c.inner, lr, m, c.lr, c.momentum)
		}
	}
}

// TestOuterPinnedIsKept: a number pins its field whatever the job's length; the other field
// stays auto.
func TestOuterPinnedIsKept(t *testing.T) {
	s, err := Parse([]byte("train: {steps: 6000}\nparallel: {inner_steps: 30, outer_lr: 0.7}"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Parallel.OuterLR != Pinned(0.7) || !s.Parallel.OuterMomentum.IsAuto {
		t.Fatalf("parsed outer %v/%v", s.Parallel.OuterLR, s.Parallel.OuterMomentum)
	}
	_, am := AutoOuter(200)
	if lr, m := s.Outer(); lr != 0.7 || m != am {
		t.Fatalf("outer %v/%v, want 0.7/%v", lr, m, am)
	}
	s.Parallel.OuterMomentum = Pinned(0)
	if lr, m := s.Outer(); lr != 0.7 || m != 0 {
		t.Fatalf("outer %v/%v, want 0.7/0", lr, m)
	}
}

// TestOuterAutoByDefault: a new spec stores "auto" and reads it back; a pinned number is
// stored as the plain number it always was.
func TestOuterAutoByDefault(t *testing.T) {
	s := DefaultSpec()
	if !s.Parallel.OuterLR.IsAuto || !s.Parallel.OuterMomentum.IsAuto {
		t.Fatalf("default outer %v/%v, want auto/auto", s.Parallel.OuterLR, s.Parallel.OuterMomentum)
	}
	b, err := json.Marshal(s.Parallel)
	if err != nil || !strings.Contains(string(b), `"outer_lr":"auto","outer_momentum":"auto"`) {
		t.Fatalf("json %s, %v", b, err)
	}
	s.Parallel.OuterLR, s.Parallel.OuterMomentum = Pinned(1.25), Pinned(0)
	b, err = json.Marshal(s.Parallel)
	if err != nil || !strings.Contains(string(b), `"outer_lr":1.25,"outer_momentum":0,`) {
		t.Fatalf("json %s, %v", b, err)
	}
	var back Parallel
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s.Parallel) {
		t.Fatalf("round trip %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"outer_lr":true}`), &back); err == nil {
		t.Fatal("outer_lr: true decoded")
	}
}

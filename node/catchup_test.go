package node

import (
	"context"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/internal/testutil"
)

// fakeLeader answers LeaderIndex with index, or err, and counts the questions; cut says
// the node hears from no leader.
type fakeLeader struct {
	index uint64
	err   error
	asked int
	cut   bool
}

func (f *fakeLeader) OutOfTouch() bool { return f.cut }

func (f *fakeLeader) LeaderIndex(context.Context) (uint64, error) {
	f.asked++
	return f.index, f.err
}

// TestCatchUpWaitsForTheLeadersIndex: a node acts on its jobs only once its FSM has applied
// what the leader had when first asked; a failed question is asked again, an answered one
// never; a new control plane, or one that was out of touch, is caught up afresh.
func TestCatchUpWaitsForTheLeadersIndex(t *testing.T) {
	ctx, log := context.Background(), testutil.Logger(t)
	l := &fakeLeader{err: errors.New("no leader")}
	var u catchUp
	if u.check(ctx, l, 40, log) || u.done(l) {
		t.Fatal("caught up without the leader's index")
	}
	l.index, l.err = 100, nil
	for _, applied := range []uint64{40, 99} {
		if u.check(ctx, l, applied, log) {
			t.Fatalf("caught up at %d of the leader's 100", applied)
		}
	}
	l.index = 500 // the leader moves on: what the node waits for stays what it was asked
	if !u.check(ctx, l, 100, log) || !u.done(l) {
		t.Fatal("not caught up at the leader's index")
	}
	if l.asked != 2 {
		t.Errorf("asked the leader %d times, want 2 (one failed, one answered)", l.asked)
	}
	if !u.check(ctx, l, 100, log) || l.asked != 2 {
		t.Errorf("a caught-up node asked again (%d questions)", l.asked)
	}

	l.cut = true // a partition: nothing until back in touch and caught up again
	if u.check(ctx, l, 100, log) || u.done(l) {
		t.Fatal("acting on jobs while out of touch with every leader")
	}
	l.cut = false
	if u.check(ctx, l, 100, log) || !u.check(ctx, l, 500, log) {
		t.Error("after the partition: want caught up at the leader's new index 500, not before")
	}

	restarted := &fakeLeader{index: 7}
	if u.done(restarted) || u.check(ctx, restarted, 3, log) {
		t.Fatal("a new control plane counted as caught up")
	}
	if !u.check(ctx, restarted, 7, log) {
		t.Fatal("the new control plane did not catch up at its leader's index")
	}
	// A cluster whose leader has applied no entry yet: nothing to wait for.
	var fresh catchUp
	if !fresh.check(ctx, &fakeLeader{}, 0, log) {
		t.Error("a fresh cluster: not caught up at the leader's index 0")
	}
}

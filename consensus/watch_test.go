package consensus

import (
	"io"
	"testing"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChangedClosesAtApplyAndRestore: a channel taken before an apply is closed by it, one
// taken after is not until the next change, and a snapshot restore closes it too.
func TestChangedClosesAtApplyAndRestore(t *testing.T) {
	h := newHarness(t)
	f := h.fsm
	before := f.Changed()
	if closed(before) {
		t.Fatal("closed before any change")
	}
	h.mustOK(NodeStatusType, NodeStatusRequest{ID: "n", Status: NodeAlive, Time: t0})
	after := f.Changed()
	if !closed(before) || closed(after) {
		t.Fatalf("after apply: before closed %v (want true), after closed %v (want false)", closed(before), closed(after))
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	if !closed(after) {
		t.Fatal("restore did not close the channel")
	}
}

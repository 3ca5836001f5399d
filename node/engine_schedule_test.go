package node

import (
	"testing"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/scheduler"
)

// TestSchedulerSpeaksTheFSMsVocabulary: job statuses and event kinds are one type
// (jobspec's) on both sides; the scheduler's member states are the peer table's strings and
// its checkpoint file kinds the manifests', so the views the engine builds and the
// decisions it commits mean the same on both sides.
func TestSchedulerSpeaksTheFSMsVocabulary(t *testing.T) {
	states := map[scheduler.MemberState]mesh.PeerState{
		scheduler.MemberAlive: mesh.StateAlive, scheduler.MemberSuspect: mesh.StateSuspect, scheduler.MemberDead: mesh.StateDead,
	}
	for s, m := range states {
		if string(s) != string(m) {
			t.Errorf("scheduler member state %q, peer table %q", s, m)
		}
	}
	if string(scheduler.FileModel) != "model" || string(scheduler.FileOptimizer) != "optimizer" {
		t.Errorf("checkpoint file kinds %q, %q: the manifests say model and optimizer", scheduler.FileModel, scheduler.FileOptimizer)
	}
}

package node

import (
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/scheduler"
)

// TestSchedulerSpeaksTheFSMsVocabulary: the scheduler's pure types name event kinds and
// job statuses with the control plane's strings and member states with the peer table's, so the views the engine builds and the
// decisions it commits mean the same on both sides.
func TestSchedulerSpeaksTheFSMsVocabulary(t *testing.T) {
	kinds := map[scheduler.EventKind]consensus.EventKind{
		scheduler.EventWorkerFailed:  consensus.EventWorkerFailed,
		scheduler.EventWorkerStopped: consensus.EventWorkerStopped,
		scheduler.EventReplan:        consensus.EventReplan,
		scheduler.EventRebalance:     consensus.EventRebalance,
	}
	for s, c := range kinds {
		if string(s) != string(c) {
			t.Errorf("scheduler event kind %q, consensus %q", s, c)
		}
	}
	statuses := map[scheduler.Status]consensus.JobStatus{
		scheduler.StatusSubmitted: consensus.JobSubmitted, scheduler.StatusPlanning: consensus.JobPlanning,
		scheduler.StatusRunning: consensus.JobRunning, scheduler.StatusDone: consensus.JobDone,
		scheduler.StatusFailed: consensus.JobFailed, scheduler.StatusCancelled: consensus.JobCancelled,
	}
	for s, c := range statuses {
		if string(s) != string(c) {
			t.Errorf("scheduler status %q, consensus %q", s, c)
		}
	}
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

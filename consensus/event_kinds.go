package consensus

// EventKind names a kind of line in a job's event log: the FSM writes some itself, the
// leader's scheduler and the nodes' runners write the others.
type EventKind string

// Event kinds. The strings are part of the FSM's stored state and of the API: never change
// one, only add.
const (
	EventSubmitted  EventKind = "submitted"  // the job was submitted (FSM)
	EventStatus     EventKind = "status"     // the job's status changed (FSM)
	EventPlan       EventKind = "plan"       // a plan epoch was committed (FSM)
	EventCheckpoint EventKind = "checkpoint" // a checkpoint's first files were committed (FSM)
	EventDone       EventKind = "done"       // the job's last stage finished every step
	// EventWorkerFailed: a worker of the epoch failed, at its step; the leader replans.
	EventWorkerFailed EventKind = "worker_failed"
	// EventWorkerStopped: a worker stopped for a new epoch, at the step it reached.
	EventWorkerStopped EventKind = "worker_stopped"
	// EventReplan: a new epoch after a failure (counts towards the restart limit).
	EventReplan EventKind = "replan"
	// EventRebalance: a new epoch because joined nodes make the job faster.
	EventRebalance EventKind = "rebalance"
)

// NewEvent is an event of kind; the control plane stamps its time.
func NewEvent(kind EventKind, epoch uint64, step int, message string) Event {
	return Event{Kind: kind, Epoch: epoch, Step: step, Message: message}
}

// Is reports whether e is of kind.
func (e Event) Is(kind EventKind) bool { return e.Kind == kind }

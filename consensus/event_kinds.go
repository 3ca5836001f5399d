package consensus

import "github.com/meshnode/meshnode/consensus/jobspec"

// EventKind names a kind of line in a job's event log (jobspec.EventKind: the vocabulary
// the scheduler and the runners share without importing the control plane).
type EventKind = jobspec.EventKind

// Event kinds, as jobspec defines them.
const (
	EventSubmitted     = jobspec.EventSubmitted
	EventStatus        = jobspec.EventStatus
	EventPlan          = jobspec.EventPlan
	EventCheckpoint    = jobspec.EventCheckpoint
	EventDone          = jobspec.EventDone
	EventWorkerFailed  = jobspec.EventWorkerFailed
	EventWorkerStopped = jobspec.EventWorkerStopped
	EventReplan        = jobspec.EventReplan
	EventRebalance     = jobspec.EventRebalance
	// EventContributionRejected and EventStepSkipped are training-integrity reports.
	EventContributionRejected = jobspec.EventContributionRejected
	EventStepSkipped          = jobspec.EventStepSkipped
	EventOffender             = jobspec.EventOffender
	// EventStateCopied: a rejoining node copied its state from a live replica.
	EventStateCopied = jobspec.EventStateCopied
	// EventRejoined: a rejoining node's worker was admitted into the outer steps' quorum.
	EventRejoined = jobspec.EventRejoined
	// EventLocalEval is a data.local replica's validation loss on its own node's data.
	EventLocalEval = jobspec.EventLocalEval
)

// NewEvent is an event of kind; the control plane stamps its time.
func NewEvent(kind EventKind, epoch uint64, step int, message string) Event {
	return Event{Kind: kind, Epoch: epoch, Step: step, Message: message}
}

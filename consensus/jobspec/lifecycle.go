package jobspec

import (
	"fmt"
	"strings"
)

// JobStatus is where a job is in its life. The strings are part of the control plane's
// stored state and of the API: never change one, only add.
type JobStatus string

// Job statuses. Done, failed and cancelled are terminal.
const (
	JobSubmitted JobStatus = "submitted"
	JobPlanning  JobStatus = "planning"
	JobRunning   JobStatus = "running"
	JobDone      JobStatus = "done"
	JobFailed    JobStatus = "failed"
	JobCancelled JobStatus = "cancelled"
)

// Terminal reports whether no further change is allowed.
func (s JobStatus) Terminal() bool {
	return s == JobDone || s == JobFailed || s == JobCancelled
}

// EventKind names a kind of line in a job's event log: the control plane's FSM writes some
// itself, the leader's scheduler and the nodes' runners write the others. The strings are
// part of the stored state and of the API: never change one, only add.
type EventKind string

// Event kinds.
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
	// EventContributionRejected: a worker dropped replicas' contributions (not finite,
	// outsized, undecodable) instead of aggregating them; the message names them.
	EventContributionRejected EventKind = "contribution_rejected"
	// EventStepSkipped: a step's gradient norm was not finite; no parameter was updated.
	EventStepSkipped EventKind = "step_skipped"
	// EventOffender: a worker dropped the same member's contributions in several
	// consecutive synchronisations; the message (OffenderMessage) names it, and the
	// scheduler leaves it out of the job's next plan.
	EventOffender EventKind = "offender"
	// EventStateCopied: a node that rejoined a running job in place (scheduler.JobPlan.Rejoin)
	// copied its stage's state from a live replica; the message names the source, the
	// step, the bytes and how long it took.
	EventStateCopied EventKind = "state_copied"
	// EventRejoined: a rejoining node's worker was admitted into the outer steps' quorum at
	// its step; its contributions count from the next outer step on.
	EventRejoined EventKind = "rejoined"
	// EventLocalEval: a replica of a data.local job evaluated on its own node's validation
	// split; the message (LocalEvalMessage) names the node's dataset, its size and the
	// loss, the event's By the node.
	EventLocalEval EventKind = "local_eval"
)

// localEvalPrefix starts a local evaluation event's message, before the dataset's name.
const localEvalPrefix = "local data "

// LocalEvalMessage is the message of an EventLocalEval: the node's local dataset name,
// its split sizes in tokens and the validation loss on its own split.
func LocalEvalMessage(dataset string, trainTokens, valTokens int, loss float64) string {
	return fmt.Sprintf("%s%s: val loss %.6f (train %d tokens, val %d tokens)", localEvalPrefix, dataset, loss, trainTokens, valTokens)
}

// LocalEvalOf returns the dataset and the validation loss an EventLocalEval's message
// names (LocalEvalMessage).
func LocalEvalOf(msg string) (dataset string, loss float64, ok bool) {
	rest, ok := strings.CutPrefix(msg, localEvalPrefix)
	if !ok {
		return "", 0, false
	}
	dataset, rest, ok = strings.Cut(rest, ": val loss ")
	if !ok || dataset == "" {
		return "", 0, false
	}
	if _, err := fmt.Sscanf(rest, "%g", &loss); err != nil {
		return "", 0, false
	}
	return dataset, loss, true
}

// offenderPrefix starts an offender event's message, before the member's id.
const offenderPrefix = "offender "

// OffenderMessage is the message of an EventOffender naming member, with why.
func OffenderMessage(member, why string) string { return offenderPrefix + member + ": " + why }

// OffenderOf returns the member an EventOffender's message names (OffenderMessage).
func OffenderOf(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, offenderPrefix)
	if !ok {
		return "", false
	}
	member, _, ok := strings.Cut(rest, ": ")
	return member, ok && member != ""
}

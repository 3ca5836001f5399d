package consensus

import "errors"

// Sentinel errors. Callers branch on them with errors.Is; they survive forwarding over RPC.
var (
	// ErrNotLeader means this node cannot serve the request because it is not the leader
	// and the request was not applied. Writes made through Consensus retry it internally.
	ErrNotLeader = errors.New("not the raft leader")
	// ErrNoLeader means no leader could be found before the context ended.
	ErrNoLeader = errors.New("no raft leader reachable")
	// ErrLeadershipLost means the leader lost its leadership while a write was in flight:
	// the write may or may not have been committed.
	ErrLeadershipLost = errors.New("leadership lost while the write was in flight; it may or may not be committed")
	// ErrShutdown means the consensus component is shutting down.
	ErrShutdown = errors.New("consensus is shut down")
	// ErrJobNotFound means no job has the given id.
	ErrJobNotFound = errors.New("job not found")
	// ErrJobFinished means the job is done, failed or cancelled and cannot change any more.
	ErrJobFinished = errors.New("job already finished")
	// ErrBadTransition means the requested status does not follow from the job's status.
	ErrBadTransition = errors.New("job status transition not allowed")
	// ErrStaleEpoch means a plan's epoch is not newer than the job's current epoch.
	ErrStaleEpoch = errors.New("plan epoch is not newer than the current one")
	// ErrTooLarge means a message exceeds the size the protocol allows.
	ErrTooLarge = errors.New("message too large")
	// ErrInvalidSpec means a job spec failed validation; the error names every bad field.
	ErrInvalidSpec = errors.New("invalid job spec")
	// ErrBadRequest means a request could not be decoded or names an unknown operation.
	ErrBadRequest = errors.New("bad request")
	// ErrForbidden means the calling peer may not perform this operation (on this job).
	ErrForbidden = errors.New("operation not allowed for this peer")
	// ErrNotMember means the peer is not in the raft configuration.
	ErrNotMember = errors.New("not a member of the raft group")
	// ErrNotVoter means the peer is a non-voter of the raft configuration and sent what
	// only voters may send (raft RPCs).
	ErrNotVoter = errors.New("not a voter of the raft group")
	// ErrForeignCluster means the peer belongs to another, independently bootstrapped
	// cluster.
	ErrForeignCluster = errors.New("peer of a foreign cluster")
	// ErrQuota means the calling member already has as many live jobs as it may.
	ErrQuota = errors.New("quota exceeded")
	// ErrBadEntry means a raft log entry could not be applied: unknown type, corrupt or
	// invalid payload. Every replica returns the same error for it.
	ErrBadEntry = errors.New("bad log entry")
)

// errorCodes names each sentinel on the wire.
var errorCodes = map[string]error{
	"not_leader":      ErrNotLeader,
	"no_leader":       ErrNoLeader,
	"leadership_lost": ErrLeadershipLost,
	"shutdown":        ErrShutdown,
	"job_not_found":   ErrJobNotFound,
	"job_finished":    ErrJobFinished,
	"bad_transition":  ErrBadTransition,
	"stale_epoch":     ErrStaleEpoch,
	"too_large":       ErrTooLarge,
	"bad_request":     ErrBadRequest,
	"busy":            ErrBusy,
	"invalid_spec":    ErrInvalidSpec,
	"forbidden":       ErrForbidden,
	"not_member":      ErrNotMember,
	"not_voter":       ErrNotVoter,
	"foreign_cluster": ErrForeignCluster,
	"bad_entry":       ErrBadEntry,
	"quota_exceeded":  ErrQuota,
}

func codeOf(err error) string {
	for code, sentinel := range errorCodes {
		if errors.Is(err, sentinel) {
			return code
		}
	}
	return "internal"
}

// remoteError is an error that came back from another node: its message, and the sentinel
// it wraps when the code named one.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

func errorFromWire(code, msg string) error {
	return &remoteError{msg: msg, sentinel: errorCodes[code]}
}

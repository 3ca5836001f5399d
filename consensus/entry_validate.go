package consensus

import (
	"errors"
	"fmt"
	"regexp"
)

// Validation of every log entry before it is applied (and of every request before the
// leader proposes it). Job IDs become checkpoint paths on every node, so they match a
// strict pattern; every string and list that the FSM keeps is bounded.

var (
	// jobIDPattern: lower-case letters, digits, '-' and '_', starting with a letter or
	// digit: never '/', '.', or anything a path could interpret.
	jobIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	// nodeIDPattern: a peer ID's text form (base58 or base32 multihash).
	nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,128}$`)
)

// Bounds of what one entry may carry.
const (
	maxMessageLen = 1024
	maxKindLen    = 64
	maxAddrs      = 64
	maxAddrLen    = 256
	maxHashLen    = 128
	maxNameLen    = 128
)

func checkJobID(field, id string) error {
	if !jobIDPattern.MatchString(id) {
		return fmt.Errorf("%s %q: must match %s", field, id, jobIDPattern)
	}
	return nil
}

func checkNodeID(field, id string) error {
	if !nodeIDPattern.MatchString(id) {
		return fmt.Errorf("%s %q: not a peer ID", field, id)
	}
	return nil
}

func checkLen[S ~string](field string, s S, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s: %d bytes (max %d)", field, len(s), max)
	}
	return nil
}

func checkNodeStatus(s NodeStatus) error {
	switch s {
	case NodeAlive, NodeDead, NodeLeft:
		return nil
	}
	return fmt.Errorf("node status %q unknown", s)
}

// bounded returns n with what a node announces about itself cut to the bounds validate
// enforces: a machine with many interfaces still joins, with its first addresses.
func (n Node) bounded() Node {
	var addrs []string
	for _, a := range n.Addrs {
		if len(a) <= maxAddrLen && len(addrs) < maxAddrs {
			addrs = append(addrs, a)
		}
	}
	n.Addrs = addrs
	n.Profile.GPUName = truncate(n.Profile.GPUName, maxNameLen)
	return n
}

func (n Node) validate() error {
	errs := []error{checkNodeID("node id", n.ID), checkNodeStatus(n.Status),
		checkLen("profile.gpu_name", n.Profile.GPUName, maxNameLen)}
	if len(n.Addrs) > maxAddrs {
		errs = append(errs, fmt.Errorf("node addrs: %d (max %d)", len(n.Addrs), maxAddrs))
	}
	for _, a := range n.Addrs {
		errs = append(errs, checkLen("node addr", a, maxAddrLen))
	}
	return errors.Join(errs...)
}

func (r NodeUpsertRequest) validate() error { return r.Node.validate() }

func (r NodeStatusRequest) validate() error {
	return errors.Join(checkNodeID("node id", r.ID), checkNodeStatus(r.Status))
}

func (r JobSubmitRequest) validate() error {
	err := checkJobID("job id", r.ID)
	if r.SubmittedBy != "" {
		err = errors.Join(err, checkNodeID("submitted_by", r.SubmittedBy))
	}
	return err
}

func (r JobStatusRequest) validate() error {
	var err error
	if _, known := allowedNext[r.Status]; !known && !r.Status.Terminal() {
		err = fmt.Errorf("job status %q unknown", r.Status)
	}
	return errors.Join(checkJobID("job id", r.ID), err, checkLen("message", r.Message, maxMessageLen))
}

func (r PlanSetRequest) validate() error {
	var err error
	if len(r.Plan) == 0 || string(r.Plan) == "null" {
		err = errors.New("plan is empty")
	}
	return errors.Join(checkJobID("job id", r.JobID), err, checkLen("reason", r.Reason, maxMessageLen))
}

func (r ProgressRequest) validate() error {
	var err error
	if len(r.Samples) > maxSamplesPerReport {
		err = fmt.Errorf("%d progress samples (max %d)", len(r.Samples), maxSamplesPerReport)
	}
	errs := []error{checkJobID("job id", r.JobID), err}
	if len(r.Stages) > maxStagesPerReport {
		errs = append(errs, fmt.Errorf("%d phase times (max %d)", len(r.Stages), maxStagesPerReport))
	}
	for _, s := range r.Stages {
		errs = append(errs, checkNodeID("phase times node", s.Node), checkStageTimes(s))
	}
	return errors.Join(errs...)
}

// maxPhaseSeconds bounds one phase's mean time per step in a StageTimes entry.
const maxPhaseSeconds = 1e6

// checkStageTimes requires finite, non-negative phase times and a positive step count.
func checkStageTimes(s StageTimes) error {
	for _, v := range []float64{s.Compute, s.Transfer, s.Bubble, s.Sync} {
		if !(v >= 0 && v <= maxPhaseSeconds) {
			return fmt.Errorf("phase times of %s: %v s is not a time between 0 and %g s", s.Node, v, float64(maxPhaseSeconds))
		}
	}
	if s.Steps < 1 || s.Step < 0 {
		return fmt.Errorf("phase times of %s: %d steps up to step %d", s.Node, s.Steps, s.Step)
	}
	return nil
}

func (r CheckpointRequest) validate() error {
	errs := []error{checkJobID("job id", r.JobID)}
	if len(r.Manifest.Files) > MaxFilesPerCheckpoint {
		errs = append(errs, fmt.Errorf("%d checkpoint files (max %d)", len(r.Manifest.Files), MaxFilesPerCheckpoint))
	}
	for _, f := range r.Manifest.Files {
		errs = append(errs, checkNodeID("checkpoint file node", f.Node), checkLen("checkpoint file hash", f.Hash, maxHashLen),
			checkLen("checkpoint file kind", f.Kind, maxKindLen))
	}
	return errors.Join(errs...)
}

func (r JobEventRequest) validate() error {
	return errors.Join(checkJobID("job id", r.JobID), checkLen("event kind", r.Event.Kind, maxKindLen),
		checkLen("event message", r.Event.Message, maxMessageLen))
}

func (r ClusterMetaRequest) validate() error {
	var errs []error
	if !clusterIDPattern.MatchString(r.ClusterID) {
		errs = append(errs, fmt.Errorf("cluster id %q: not 32 hex digits", r.ClusterID))
	}
	if r.KeepFinishedJobs < 0 || r.KeepFinishedJobs > MaxKeepFinishedJobs {
		errs = append(errs, fmt.Errorf("keep_finished_jobs %d: must be 0 to %d", r.KeepFinishedJobs, MaxKeepFinishedJobs))
	}
	if r.MaxLiveJobsPerMember < 0 || r.MaxLiveJobsPerMember > MaxMaxLiveJobsPerMember {
		errs = append(errs, fmt.Errorf("max_live_jobs_per_member %d: must be 0 to %d", r.MaxLiveJobsPerMember, MaxMaxLiveJobsPerMember))
	}
	return errors.Join(errs...)
}

// validate checks a restored snapshot: every key and record as Apply would have.
func (st *fsmState) validate() error {
	var errs []error
	for id, n := range st.Nodes {
		if id != n.ID {
			errs = append(errs, fmt.Errorf("node key %q holds node %q", id, n.ID))
		}
		errs = append(errs, n.validate())
	}
	for id, j := range st.Jobs {
		if j == nil || id != j.ID {
			errs = append(errs, fmt.Errorf("job key %q holds another job", id))
			continue
		}
		errs = append(errs, checkJobID("job id", id))
	}
	if len(st.Promotions) > MaxPromotionDecisions {
		errs = append(errs, fmt.Errorf("%d promotion decisions (max %d)", len(st.Promotions), MaxPromotionDecisions))
	}
	for id, d := range st.Promotions {
		errs = append(errs, PromotionRequest{ID: id, Decision: d}.validate())
	}
	if len(st.SpeedProofs) > MaxSpeedProofs {
		errs = append(errs, fmt.Errorf("%d speed proofs (max %d)", len(st.SpeedProofs), MaxSpeedProofs))
	}
	for id, p := range st.SpeedProofs {
		if id != p.ID {
			errs = append(errs, fmt.Errorf("speed proof key %q holds node %q", id, p.ID))
		}
		errs = append(errs, p.validate())
	}
	if st.ClusterID != "" && !clusterIDPattern.MatchString(st.ClusterID) {
		errs = append(errs, fmt.Errorf("cluster id %q: not 32 hex digits", st.ClusterID))
	}
	return errors.Join(errs...)
}

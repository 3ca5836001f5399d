package runner

import (
	"time"

	"github.com/meshnode/meshnode/parallel"
)

// Metrics receives the runner's training measurements as they happen. Its methods are
// called from training and checkpoint goroutines and must not block.
type Metrics interface {
	// ObserveStep records one optimizer step of this node's worker of job, split by phase.
	ObserveStep(job string, t parallel.StepTimes)
	// ObserveCheckpointWrite records the time to encode, write and publish this node's
	// files of one checkpoint of job.
	ObserveCheckpointWrite(job string, d time.Duration)
	// ObserveCheckpointReplication records the time another node took to fetch and verify
	// this node's files of one checkpoint of job (successful replications only).
	ObserveCheckpointReplication(job string, d time.Duration)
	// ObserveRejected records a contribution of member (a replica of job's plan) this
	// node's worker dropped instead of aggregating it.
	ObserveRejected(job, member string)
	// ObserveSkipped records a step of job skipped for a non-finite gradient norm.
	ObserveSkipped(job string)
	// ObserveOffender records member (a replica of job's plan) named an offender by this
	// node's worker: its contributions were dropped in several consecutive syncs.
	ObserveOffender(job, member string)
	// ObserveAudits records n contributions of job's other replicas this node's worker
	// recomputed (parallel.audit).
	ObserveAudits(job string, n int)
}

// noMetrics is the Metrics of a runner configured without any.
type noMetrics struct{}

func (noMetrics) ObserveStep(string, parallel.StepTimes)             {}
func (noMetrics) ObserveCheckpointWrite(string, time.Duration)       {}
func (noMetrics) ObserveCheckpointReplication(string, time.Duration) {}
func (noMetrics) ObserveRejected(string, string)                     {}
func (noMetrics) ObserveSkipped(string)                              {}
func (noMetrics) ObserveOffender(string, string)                     {}
func (noMetrics) ObserveAudits(string, int)                          {}

package node

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
)

// trainingMetrics records what this node's workers measure as they train: step time by
// phase and checkpoint durations. It is the runner's Metrics (node/runner/metrics.go).
// Series carry the job label; the series of a job the FSM no longer keeps are dropped
// (forgetJobsExcept), so they are bounded by the FSM's job limits.
type trainingMetrics struct {
	mu          sync.Mutex
	jobs        map[string]bool // jobs that have series
	phase       *prometheus.CounterVec
	steps       *prometheus.CounterVec
	ckptWrite   *prometheus.HistogramVec
	ckptReplica *prometheus.HistogramVec
	rejected    *prometheus.CounterVec
	skipped     *prometheus.CounterVec
	offenders   *prometheus.CounterVec
	audits      *prometheus.CounterVec
}

// stepPhases are the values of meshnode_train_step_phase_seconds_total's phase label.
var stepPhases = []string{"compute", "transfer", "bubble", "sync"}

func newTrainingMetrics(reg prometheus.Registerer) *trainingMetrics {
	buckets := prometheus.ExponentialBuckets(0.005, 2, 14) // 5 ms … 41 s
	m := &trainingMetrics{
		jobs: map[string]bool{},
		phase: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshnode_train_step_phase_seconds_total",
			Help: "Wall time of this node's optimizer steps by phase: compute, transfer (sending to pipeline neighbours), bubble (waiting for them), sync (replica sync, norm exchange, checkpoint gate).",
		}, []string{"job", "phase"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshnode_train_steps_total",
			Help: "Optimizer steps this node's worker completed (steps redone after a new plan epoch count again).",
		}, []string{"job"}),
		ckptWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshnode_checkpoint_write_seconds", Buckets: buckets,
			Help: "Time to encode, write and publish this node's files of one checkpoint.",
		}, []string{"job"}),
		ckptReplica: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshnode_checkpoint_replication_seconds", Buckets: buckets,
			Help: "Time another node took to fetch and verify this node's files of one checkpoint.",
		}, []string{"job"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshnode_train_contributions_rejected_total",
			Help: "Replicas' contributions this node's worker dropped instead of aggregating them (not finite, outsized, undecodable), by the replica that sent them.",
		}, []string{"job", "peer"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshnode_train_steps_skipped_total",
			Help: "Steps this node's worker skipped because their gradient norm was not finite.",
		}, []string{"job"}),
	}
	m.offenders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshnode_train_offenders_total",
		Help: "Replicas this node's worker named offenders: contributions dropped in several consecutive synchronisations.",
	}, []string{"job", "peer"})
	m.audits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshnode_train_audits_total",
		Help: "Other replicas' contributions this node's worker recomputed to check them (parallel.audit); a failed one is also a rejected contribution and an offender.",
	}, []string{"job"})
	reg.MustRegister(m.phase, m.steps, m.ckptWrite, m.ckptReplica, m.rejected, m.skipped, m.offenders, m.audits)
	return m
}

// seen records that job has series.
func (m *trainingMetrics) seen(job string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs[job] = true
}

// forgetJobsExcept drops every series of the jobs that are not in keep (the FSM's jobs):
// a deleted job's figures are not exported forever.
func (m *trainingMetrics) forgetJobsExcept(keep []consensus.Job) {
	kept := make(map[string]bool, len(keep))
	for _, j := range keep {
		kept[j.ID] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.jobs {
		if kept[id] {
			continue
		}
		l := prometheus.Labels{"job": id}
		m.phase.DeletePartialMatch(l)
		m.steps.DeletePartialMatch(l)
		m.ckptWrite.DeletePartialMatch(l)
		m.ckptReplica.DeletePartialMatch(l)
		m.rejected.DeletePartialMatch(l)
		m.skipped.DeletePartialMatch(l)
		m.offenders.DeletePartialMatch(l)
		m.audits.DeletePartialMatch(l)
		delete(m.jobs, id)
	}
}

// ObserveStep implements runner.Metrics.
func (m *trainingMetrics) ObserveStep(job string, t parallel.StepTimes) {
	m.seen(job)
	for i, d := range []time.Duration{t.Compute, t.Transfer, t.Bubble, t.Sync} {
		m.phase.WithLabelValues(job, stepPhases[i]).Add(max(d, 0).Seconds())
	}
	m.steps.WithLabelValues(job).Inc()
}

// ObserveCheckpointWrite implements runner.Metrics.
func (m *trainingMetrics) ObserveCheckpointWrite(job string, d time.Duration) {
	m.seen(job)
	m.ckptWrite.WithLabelValues(job).Observe(d.Seconds())
}

// ObserveCheckpointReplication implements runner.Metrics.
func (m *trainingMetrics) ObserveCheckpointReplication(job string, d time.Duration) {
	m.seen(job)
	m.ckptReplica.WithLabelValues(job).Observe(d.Seconds())
}

// ObserveRejected implements runner.Metrics.
func (m *trainingMetrics) ObserveRejected(job, member string) {
	m.seen(job)
	m.rejected.WithLabelValues(job, member).Inc()
}

// ObserveOffender implements runner.Metrics.
func (m *trainingMetrics) ObserveOffender(job, member string) {
	m.seen(job)
	m.offenders.WithLabelValues(job, member).Inc()
}

// ObserveAudits implements runner.Metrics.
func (m *trainingMetrics) ObserveAudits(job string, n int) {
	m.seen(job)
	m.audits.WithLabelValues(job).Add(float64(n))
}

// ObserveSkipped implements runner.Metrics.
func (m *trainingMetrics) ObserveSkipped(job string) {
	m.seen(job)
	m.skipped.WithLabelValues(job).Inc()
}

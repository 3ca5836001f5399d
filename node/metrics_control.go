package node

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/scheduler"
)

// raftStates are the values of meshnode_raft_state's state label, all exported at every
// scrape (1 for the current one) so that a dashboard can graph transitions.
var raftStates = []string{"Follower", "Candidate", "Leader", "Shutdown"}

// jobStatuses are the values of meshnode_job_status's status label.
var jobStatuses = []consensus.JobStatus{consensus.JobSubmitted, consensus.JobPlanning, consensus.JobRunning,
	consensus.JobDone, consensus.JobFailed, consensus.JobCancelled}

// controlCollector exports, at scrape time, the raft group as this node sees it and the
// training progress of every job in this node's copy of the FSM (committed state, so every
// node of the mesh exports the same job figures). It reads local state only: a scrape never
// waits on the leader.
type controlCollector struct {
	get func() *consensus.Consensus

	raftState, term, commit, applied, voters, nonvoters    *prometheus.Desc
	leaderChanges, rpcDisconnects                          *prometheus.Desc
	jobStatus, step, loss, valLoss, tps, stepSec, bytesOut *prometheus.Desc
	epoch, redone, checkpoints, checkpointStep             *prometheus.Desc
}

func newControlCollector(get func() *consensus.Consensus) *controlCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("meshnode_"+name, help, labels, nil)
	}
	return &controlCollector{
		get:            get,
		raftState:      d("raft_state", "1 for this node's current raft state, 0 for the others.", "state"),
		term:           d("raft_term", "This node's current raft term."),
		commit:         d("raft_commit_index", "Highest raft log index known committed."),
		applied:        d("raft_applied_index", "Highest raft log index applied to this node's FSM."),
		voters:         d("raft_voters", "Voting members of the raft configuration."),
		nonvoters:      d("raft_nonvoters", "Non-voting members of the raft configuration."),
		leaderChanges:  d("raft_leader_changes_total", "Times this node saw the raft leader change to a different server, the first leader it learnt of included."),
		rpcDisconnects: d("rpc_disconnects_total", "Peers this node disconnected for sending it what no honest member sends (offender evidence that does not decode)."),
		jobStatus:      d("job_status", "1 for the job's current status, 0 for the others.", "job", "status"),
		step:           d("job_step", "Latest optimizer step reported for the job.", "job"),
		loss:           d("job_train_loss", "Latest training loss reported for the job.", "job"),
		valLoss:        d("job_val_loss", "Latest validation loss reported for the job.", "job"),
		tps:            d("job_tokens_per_second", "Latest training throughput of the job (all replicas).", "job"),
		stepSec:        d("job_step_seconds", "Latest mean wall time of one optimizer step.", "job"),
		bytesOut:       d("job_sent_bytes_total", "Bytes the job's workers sent over the data plane, as last reported.", "job"),
		epoch:          d("job_plan_epoch", "Current plan epoch of the job.", "job"),
		redone:         d("job_steps_redone_total", "Optimizer steps the job trained twice because a plan epoch ended before its next checkpoint.", "job"),
		checkpoints:    d("job_checkpoints", "Checkpoint manifests the FSM holds for the job.", "job"),
		checkpointStep: d("job_checkpoint_step", "Step of the job's newest committed checkpoint.", "job"),
	}
}

func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	cons := c.get()
	if cons == nil {
		return
	}
	c.collectRaft(cons, ch)
	jobs, _ := cons.FSM().Jobs()
	for i := range jobs {
		c.collectJob(&jobs[i], ch)
	}
}

func (c *controlCollector) collectRaft(cons *consensus.Consensus, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cons.Status(ctx)
	for _, s := range raftStates {
		v := 0.0
		if s == st.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.raftState, prometheus.GaugeValue, v, s)
	}
	gauge(ch, c.term, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.CounterValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.CounterValue, float64(st.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, float64(cons.LeaderChanges()))
	ch <- prometheus.MustNewConstMetric(c.rpcDisconnects, prometheus.CounterValue, float64(cons.Disconnects()))
	if err == nil { // the configuration is unknown while raft shuts down
		gauge(ch, c.voters, float64(len(st.Voters)))
		gauge(ch, c.nonvoters, float64(len(st.Nonvoters)))
	}
}

func (c *controlCollector) collectJob(j *consensus.Job, ch chan<- prometheus.Metric) {
	for _, s := range jobStatuses {
		v := 0.0
		if s == j.Status {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.jobStatus, prometheus.GaugeValue, v, j.ID, string(s))
	}
	if p := j.CurrentPlan(); p != nil {
		gauge(ch, c.epoch, float64(p.Epoch), j.ID)
	}
	redone := 0
	for _, n := range scheduler.StepsRedone(scheduler.EventsFromRecord(j.Events)) {
		redone += n
	}
	ch <- prometheus.MustNewConstMetric(c.redone, prometheus.CounterValue, float64(redone), j.ID)
	gauge(ch, c.checkpoints, float64(len(j.Checkpoints)), j.ID)
	if n := len(j.Checkpoints); n > 0 {
		gauge(ch, c.checkpointStep, float64(j.Checkpoints[n-1].Step), j.ID)
	}
	c.collectProgress(j, ch)
}

func (c *controlCollector) collectProgress(j *consensus.Job, ch chan<- prometheus.Metric) {
	n := len(j.Progress)
	if n == 0 {
		return
	}
	s := j.Progress[n-1]
	gauge(ch, c.step, float64(s.Step), j.ID)
	gauge(ch, c.loss, s.Loss, j.ID)
	gauge(ch, c.tps, s.TokensPerSec, j.ID)
	gauge(ch, c.stepSec, s.StepSeconds, j.ID)
	ch <- prometheus.MustNewConstMetric(c.bytesOut, prometheus.CounterValue, float64(s.BytesSent), j.ID)
	for i := n - 1; i >= 0; i-- {
		if v := j.Progress[i].ValLoss; v != nil {
			gauge(ch, c.valLoss, *v, j.ID)
			break
		}
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

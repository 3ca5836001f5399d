package scheduler

import (
	"context"
	"fmt"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"slices"
	"strings"
	"time"
)

// State is the scheduler's read-only view of the cluster at one moment.
type State interface {
	// Jobs are every job the control plane holds.
	Jobs() []Job
	// Members are the nodes of the mesh, this one included, in a stable order: this node
	// first, then its peers as the peer table lists them.
	Members() []Member
	// Self is the ID of the node the scheduler runs on (the leader).
	Self() string
	// Now is the current time.
	Now() time.Time
}

// Committer writes decisions to the control plane. Each call waits until the write is
// committed or fails.
type Committer interface {
	SetJobStatus(ctx context.Context, jobID string, status jobspec.JobStatus, message string) error
	// SetPlan commits plan as the job's next epoch and returns that epoch.
	SetPlan(ctx context.Context, jobID string, plan JobPlan, reason string) (uint64, error)
	AddEvent(ctx context.Context, jobID string, ev Event) error
}

// Config tunes a Scheduler. The zero value of each field means its default.
type Config struct {
	// MaxRestarts bounds how many times a job is restarted from a checkpoint after
	// failures before it is marked failed (0: DefaultMaxRestarts).
	MaxRestarts int
	// GrowthInterval is how often a running job is weighed against a plan that includes
	// joined nodes (0: DefaultGrowthInterval).
	GrowthInterval time.Duration
	// Compression is a codec's size ratio against float32, for the balancer's sync-cost
	// estimate (nil: every codec 1).
	Compression func(jobspec.Codec) float64
	// CheckPlan is the engine's check that it can run a plan of numLayers layers (every
	// replica covers them with contiguous stages on distinct nodes); a plan it rejects is
	// no plan (nil: plans are not checked).
	CheckPlan func(p JobPlan, numLayers int) error
	// ProofWait bounds how long a job's first plan waits for members whose speed proof
	// is pending (Member.ProofPending), counted from the job's submission (or from when
	// this scheduler first saw it wait, if earlier); after it the job is planned on the
	// members that proved their speed (0: DefaultProofWait).
	ProofWait time.Duration
}

// Defaults of Config.
const (
	DefaultMaxRestarts    = 5
	DefaultGrowthInterval = 5 * time.Second
	// DefaultProofWait is several challenges' worth: an honest member answers in about
	// 0.3 s at its claim, the leader waits at most max(5 s, 4× that) plus 5 s to open
	// the stream, and retries a member that refused (a joiner that does not yet know its
	// leader) after 2 s. It also covers the retry of a member whose first answer was late
	// (pending until then): a smaller challenge 30 s after the first began (a member
	// answers one per 30 s per leader), answered within its 5 s. With 30 s, a job
	// submitted as the late answer was committed (a testnet is ready then) stopped
	// waiting about as the retry began.
	DefaultProofWait = 45 * time.Second
)

// Scheduler makes the leader's decisions about jobs. It remembers only when it last
// weighed growth for each job, so a new leader starts with a fresh one.
type Scheduler struct {
	cfg     Config
	checked map[string]time.Time // when growth was last weighed, per job
	// measured is, per job, the epoch whose measure considerRebalance last weighed.
	measured map[string]uint64
	waiting  map[string]time.Time // when a job was first seen waiting for speed proofs
}

// New returns a scheduler with cfg, its zero fields set to their defaults.
func New(cfg Config) *Scheduler {
	if cfg.MaxRestarts <= 0 {
		cfg.MaxRestarts = DefaultMaxRestarts
	}
	if cfg.GrowthInterval <= 0 {
		cfg.GrowthInterval = DefaultGrowthInterval
	}
	if cfg.ProofWait <= 0 {
		cfg.ProofWait = DefaultProofWait
	}
	return &Scheduler{cfg: cfg, checked: map[string]time.Time{}, measured: map[string]uint64{}, waiting: map[string]time.Time{}}
}

// Evaluate decides what every job of st needs now: a first plan for a submitted job or one
// stranded in planning (its leader changed between the two commits), or a bounded wait
// for members' pending speed proofs before it, a new epoch for a running job that lost a
// node or a worker or would run faster on joined nodes, or its failure. It commits
// nothing.
func (s *Scheduler) Evaluate(st State) []Decision {
	self, now, jobs := st.Self(), st.Now(), st.Jobs()
	// Every plan prices nodes at the speeds their measured steps showed (calibration.go).
	members := Calibrate(jobs).Apply(st.Members())
	var out []Decision
	unplanned, running := map[string]bool{}, map[string]bool{}
	for _, j := range jobs {
		var d *Decision
		eligible := withoutOffenders(members, Offenders(j))
		switch j.Status {
		case jobspec.JobSubmitted, jobspec.JobPlanning:
			d = s.planNew(j, eligible, now)
			unplanned[j.ID] = d.Kind == DecisionWait
		case jobspec.JobRunning:
			running[j.ID] = true
			d = s.supervise(j, eligible, self, now)
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	for id := range s.waiting {
		if !unplanned[id] {
			delete(s.waiting, id)
		}
	}
	for id := range s.checked { // ended or deleted jobs are not weighed again
		if !running[id] {
			delete(s.checked, id)
			delete(s.measured, id)
		}
	}
	return out
}

// planNew plans a job that has no running epoch yet. While members' speed proofs are
// pending it waits (DecisionWait), up to ProofWait from the job's submission; then it
// plans on the members that proved their speed, and a failure names the others.
func (s *Scheduler) planNew(j Job, members []Member, now time.Time) *Decision {
	pending := pendingProofs(members)
	if len(pending) > 0 {
		since, ok := s.waiting[j.ID]
		if !ok {
			since = now
			s.waiting[j.ID] = now
		}
		if !j.SubmittedAt.IsZero() && j.SubmittedAt.Before(since) {
			since = j.SubmittedAt
		}
		if until := since.Add(s.cfg.ProofWait); now.Before(until) {
			return &Decision{Job: j.ID, Kind: DecisionWait, From: j.Status,
				Reason: fmt.Sprintf("waiting for %d members' speed proofs, until %s at the latest", len(pending), until.UTC().Format("15:04:05 UTC"))}
		}
	}
	jp, err := PlanJob(j.Spec, members, s.cfg)
	if err != nil {
		reason := "no feasible plan: " + err.Error()
		if len(pending) > 0 {
			reason += fmt.Sprintf(" (%d members had not proved their speed after %s, left out: %s)",
				len(pending), s.cfg.ProofWait, nameSome(pending, maxNamed))
		}
		return &Decision{Job: j.ID, Kind: DecisionFail, From: j.Status, Reason: reason}
	}
	return &Decision{Job: j.ID, Kind: DecisionPlan, From: j.Status, Plan: &jp, Reason: jp.Reason}
}

// maxNamed bounds the members a message names: a status message is at most 1 KiB
// (consensus), and a peer ID takes 52 bytes.
const maxNamed = 8

// nameSome joins the first n of ids, and says how many more there are.
func nameSome(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:n], ", "), len(ids)-n)
}

// pendingProofs are the IDs of the live members whose speed proof is pending.
func pendingProofs(members []Member) []string {
	var out []string
	for _, m := range members {
		if m.ProofPending && m.Profile == nil && m.State == MemberAlive {
			out = append(out, m.ID)
		}
	}
	return out
}

// liveness tells live members from dead ones, as the peer table sees them: this node is
// always alive, a member the table does not list is neither alive nor dead.
type liveness struct {
	self  string
	state map[string]MemberState
}

func newLiveness(members []Member, self string) liveness {
	l := liveness{self: self, state: map[string]MemberState{}}
	for _, m := range members {
		l.state[m.ID] = m.State
	}
	return l
}

func (l liveness) alive(id string) bool { return id == l.self || l.state[id] == MemberAlive }
func (l liveness) dead(id string) bool  { return id != l.self && l.state[id] == MemberDead }

// supervise is the watch over a running job: when a node of the current plan is dead, or
// a worker of the current epoch failed, the job gets a new epoch without the dead nodes
// that resumes from the latest checkpoint whose files live nodes hold; after MaxRestarts
// such epochs the job fails; so does an epoch that makes no progress for several predicted
// step times (stalled). A healthy job is weighed against its measured steps and for growth.
func (s *Scheduler) supervise(j Job, members []Member, self string, now time.Time) *Decision {
	if j.Plan == nil {
		return nil
	}
	live := newLiveness(members, self)
	var why []string
	offenders := Offenders(j)
	for _, id := range j.Plan.Nodes() {
		if live.dead(id) {
			why = append(why, "node "+id+" is dead")
		}
		if offenders[id] {
			why = append(why, "node "+id+" is an offender (its contributions were dropped in consecutive syncs)")
		}
	}
	restarts := 0
	for _, ev := range j.Events {
		if ev.Kind == jobspec.EventReplan {
			restarts++
		}
		if ev.Kind == jobspec.EventWorkerFailed && ev.Epoch == j.Epoch && len(why) == 0 {
			why = append(why, "a worker failed: "+ev.Message)
		}
	}
	if len(why) == 0 {
		if stuck := stalled(j, now); stuck != "" {
			why = append(why, stuck)
		}
	}
	if len(why) == 0 {
		if d := rejoinDropped(j, members); d != nil {
			return d
		}
		return s.considerRebalance(j, members, live, now)
	}
	if d := dropFailedRejoin(j); d != nil {
		return d
	}
	if d := continueWithout(j, live); d != nil && failedOutsideLost(j, live) == 0 {
		return d
	}
	if restarts >= s.cfg.MaxRestarts {
		return &Decision{Job: j.ID, Kind: DecisionFail, From: j.Status, Reason: fmt.Sprintf("gave up after %d restarts: %s", restarts, why[0])}
	}
	next, err := PlanJob(j.Spec, members, s.cfg)
	if err != nil {
		return &Decision{Job: j.ID, Kind: DecisionFail, From: j.Status, Reason: "no feasible plan after a failure: " + err.Error()}
	}
	if m, ok := CompleteCheckpoint(j, live.alive); ok {
		next.ResumeStep = m.Step
	}
	reason := fmt.Sprintf("%s; resume from step %d", why[0], next.ResumeStep)
	// The newest checkpoint any stage wrote, for the record: one that is not complete with
	// live holders is why a job resumes from an older one.
	msg := fmt.Sprintf("%s (newest checkpoint written: step %d)", reason, NewestWritten(j))
	return &Decision{Job: j.ID, Kind: DecisionReplan, From: j.Status, Plan: &next, Reason: reason,
		Event: &Event{Kind: jobspec.EventReplan, Step: next.ResumeStep, Message: msg}}
}

// continueWithout is the decision to carry a DiLoCo or streaming job on without the
// replicas that hold a dead node, when at least one replica is whole: the surviving
// replicas each cover every layer, so their workers keep training in place (their outer
// steps already run by quorum) and nothing restarts from a checkpoint. nil when that does
// not apply: every-step sync, one replica, no whole replica left. The plan keeps its
// balancer inputs, so a node that comes back is not taken for a joined one.
func continueWithout(j Job, live liveness) *Decision {
	sync := j.Spec.Parallel.Sync
	if j.Plan == nil || len(j.Plan.Replicas) < 2 || (sync != jobspec.SyncDiLoCo && sync != jobspec.SyncStreaming) {
		return nil
	}
	next := *j.Plan
	next.Replicas, next.Batches, next.DataShards = nil, nil, nil
	var slots []int
	next.Built, slots = j.Plan.built(j.Epoch)
	next.Slots, next.Dropped, next.Rejoin = nil, slices.Clone(j.Plan.Dropped), nil
	var dead []string
	for r, stages := range j.Plan.Replicas {
		whole := true
		for _, st := range stages {
			if live.dead(st.Node) {
				whole = false
				dead = append(dead, st.Node)
			}
		}
		if !whole {
			d := DroppedReplica{Slot: slots[r], Stages: stages}
			if len(j.Plan.Batches) > 0 {
				d.Batch = j.Plan.Batches[r]
			}
			if len(j.Plan.DataShards) > r {
				d.Shards = j.Plan.DataShards[r]
			}
			next.Dropped = append(next.Dropped, d)
			continue
		}
		next.Slots = append(next.Slots, slots[r])
		next.Replicas = append(next.Replicas, stages)
		if len(j.Plan.Batches) > 0 {
			next.Batches = append(next.Batches, j.Plan.Batches[r])
		}
		if len(j.Plan.DataShards) > r {
			// The survivors keep the data they were training on: the dead replica's
			// shards go untrained until a new plan assigns them again.
			next.DataShards = append(next.DataShards, j.Plan.DataShards[r])
		}
	}
	if len(dead) == 0 || len(next.Replicas) == 0 {
		return nil
	}
	next.ResumeStep, next.Continues = 0, true
	next.Reason = fmt.Sprintf("%d of %d replicas go on in place without %s", len(next.Replicas), len(j.Plan.Replicas), dead[0])
	reason := fmt.Sprintf("node %s is dead; %s", dead[0], next.Reason)
	return &Decision{Job: j.ID, Kind: DecisionContinue, From: j.Status, Plan: &next, Reason: reason}
}

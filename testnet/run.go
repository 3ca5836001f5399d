package testnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/records"
)

// Reporter receives what a testnet session does: package testnet decides what happens and
// when, the caller (the CLI) how it looks (text, JSON lines, a progress bar).
type Reporter interface {
	// Info is one line about the session: nodes started, job submitted, an evaluation.
	Info(format string, args ...any)
	// Begin is called before a job of steps steps is followed, End after.
	Begin(steps int)
	End()
	// Progress is each view of the followed job, in order.
	Progress(job records.JobDetail)
}

// launchTimeout bounds starting the nodes and waiting for the testnet to be ready.
const launchTimeout = 3 * time.Minute

// pollInterval is how often a followed job is read.
const pollInterval = time.Second

// Launch starts the nodes, reports each, and waits until the testnet is ready: every
// node has measured itself and its links, there is a Raft leader, and it proved every
// other node's speed.
func (tn *Testnet) Launch(ctx context.Context, rep Reporter) error {
	rep.Info("starting %d nodes in %s", len(tn.cfg.Topology.Nodes), tn.Dir()) // Nodes() lists only started ones
	ctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	if err := tn.Start(ctx); err != nil {
		return err
	}
	for _, n := range tn.Nodes() {
		rep.Info("  %-8s region %-6s slowdown %-4g pid %-7d api %s", n.Spec.Name, n.Spec.Region, n.Spec.Slowdown, n.PID(), n.API)
	}
	rep.Info("waiting for the nodes to meet, probe their links, elect a leader and prove their speeds")
	return tn.WaitReady(ctx)
}

// Submit submits spec through the first node; local data paths must lie under dataRoot,
// as with `meshnode submit`.
func (tn *Testnet) Submit(ctx context.Context, spec jobspec.Spec, dataRoot string) (string, error) {
	body, err := spec.Document()
	if err != nil {
		return "", err
	}
	id, err := tn.Nodes()[0].Client().Submit(ctx, body, dataRoot)
	if err != nil {
		return "", fmt.Errorf("submit the job: %w", err)
	}
	return id, nil
}

// Cancel cancels job id through the first live node.
func (tn *Testnet) Cancel(ctx context.Context, id string) error {
	err := errors.New("no node is running")
	for _, n := range tn.Nodes() {
		if n.Alive() {
			if _, err = n.Client().Cancel(ctx, id); err == nil {
				return nil
			}
		}
	}
	return err
}

// Job reads job id from any live node.
func (tn *Testnet) Job(ctx context.Context, id string) (records.JobDetail, error) {
	err := errors.New("no node is running")
	for _, n := range tn.Nodes() {
		if !n.Alive() {
			continue
		}
		var job records.JobDetail
		if job, err = n.Client().Job(ctx, id, false); err == nil {
			return job, nil
		}
	}
	return records.JobDetail{}, err
}

// Profiles collects every live node's view of itself and of its peers, by node ID.
func (tn *Testnet) Profiles(ctx context.Context) map[string]api.Peer {
	out := map[string]api.Peer{}
	for _, n := range tn.Nodes() {
		if !n.Alive() {
			continue
		}
		a := n.Client()
		if st, err := a.Status(ctx); err == nil {
			out[st.ID] = api.Peer{ID: st.ID, Profile: st.Profile}
		}
		if peers, err := a.Peers(ctx); err == nil {
			for _, p := range peers {
				if _, ok := out[p.ID]; !ok && p.Profile != nil {
					out[p.ID] = p
				}
			}
		}
	}
	return out
}

// WireBytes is what has crossed the emulated links (every relay) so far.
func (tn *Testnet) WireBytes() uint64 {
	var sum uint64
	for _, l := range tn.Network().Stats() {
		sum += l.Bytes
	}
	return sum
}

// Train submits spec, follows it to its end within timeout, and summarises it; the error
// says how it ended when that is not done.
func (tn *Testnet) Train(ctx context.Context, spec jobspec.Spec, dataRoot string, timeout time.Duration, rep Reporter) (Summary, error) {
	id, err := tn.Submit(ctx, spec, dataRoot)
	if err != nil {
		return Summary{}, err
	}
	rep.Info("submitted job %s (%d steps)", id, spec.Train.Steps)
	wire0 := tn.WireBytes()
	epochs := newEpochLog()
	f := Follower{Job: epochs.wrap(tn.Job), Interval: pollInterval, Reporter: rep}
	job, err := f.Follow(ctx, id, spec.Train.Steps, timeout)
	if err != nil {
		return Summary{}, err
	}
	sum := Summarize(job, tn.State().Nodes, tn.Profiles(ctx))
	sum.Epochs = epochs.epochs()
	if steps := job.Progress.Step; steps > 0 {
		sum.WireBytesPerStep = float64(tn.WireBytes()-wire0) / float64(steps)
	}
	if job.Status != jobspec.JobDone {
		return sum, fmt.Errorf("job %s ended %s%s", id, job.Status, job.LastEventMessage())
	}
	return sum, nil
}

// Compare runs spec on a fresh testnet of cfg (started and stopped here) for budget of wall
// time from its submission, then cancels it, and returns the run of variant and round.
func Compare(ctx context.Context, cfg Config, variant string, round int, spec jobspec.Spec, dataRoot string, budget time.Duration, rep Reporter) (run Trial, err error) {
	tn, err := New(cfg)
	if err != nil {
		return run, err
	}
	defer func() {
		if serr := tn.Stop(); err == nil && serr != nil {
			err = serr
		}
	}()
	rep.Info("variant %s, round %d", variant, round)
	if err := tn.Launch(ctx, rep); err != nil {
		return run, err
	}
	id, err := tn.Submit(ctx, spec, dataRoot)
	if err != nil {
		return run, err
	}
	submitted := time.Now()
	f := Follower{Job: tn.Job, Cancel: tn.Cancel, Interval: pollInterval, Reporter: rep}
	job, samples, err := f.FollowFor(ctx, id, submitted, budget)
	if err != nil {
		return run, err
	}
	return TrialFromJob(variant, round, job, samples, submitted, budget), nil
}

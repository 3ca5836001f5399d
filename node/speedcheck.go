package node

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node/fingerprint"
	"github.com/meshnode/meshnode/node/speedproof"
	"github.com/meshnode/meshnode/records"
	"github.com/meshnode/meshnode/scheduler"
)

// A member's claimed compute speed is planned with only as far as it proved it: the Raft
// leader challenges every alive member whose profile the balancer could plan on
// (node/speedproof), members of one machine one at a time (pass), and commits what it
// proved (consensus.SpeedProof); members() prices each peer at min(claimed, ProofSlack × proved), and leaves a peer without a proof
// out of plans. The leader itself, and on other nodes the node itself, are trusted.

// Tunables of the speed check; tests lower them.
var (
	// speedProofTarget is how long a challenge takes at the member's claimed speed
	// (Config.speedProofTarget in tests).
	speedProofTarget = 300 * time.Millisecond
	// speedCheckTick is how often the leader looks for members to challenge.
	speedCheckTick = time.Second
	// speedRetry is the least time between two challenges of one member: after one that
	// proved less than its claim (and the claim changed since), or one that was refused
	// or not reproducible here.
	speedRetry = speedproof.DefaultMinInterval
	// speedRetryRefused is the least time before a member that refused a challenge (or
	// whose stream failed) is challenged again: a joiner refuses until it learns who
	// leads, which takes a heartbeat or two.
	speedRetryRefused = 2 * time.Second
	// speedRetryAfterLie is the least time before a member whose answer was wrong is
	// challenged again (and only once its profile changed).
	speedRetryAfterLie = time.Hour
)

// speed proof results, the values of meshnode_speed_proofs_total's result label.
const (
	proofProved       = "proved"       // a correct answer: its rate is committed
	proofWrong        = "wrong"        // a wrong answer: a lie, committed as proving nothing
	proofTimeout      = "timeout"      // no answer within speedproof.Timeout: proved nothing
	proofRefused      = "refused"      // the stream failed before that (not committed)
	proofUnverifiable = "unverifiable" // a kernel path this node cannot reproduce (not committed)
)

// speedChecker serves this node's proofs and, on the leader, challenges the members.
type speedChecker struct {
	n      *Node
	log    *slog.Logger
	prover *speedproof.Prover
	proofs *prometheus.CounterVec

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	last map[peer.ID]attempt // this node's last challenge of each member
}

// attempt is this node's last challenge of a member: when, whether it was refused
// (nothing proved, nothing committed), and how many challenges in a row it left
// unanswered until their timeout (each doubles the wait before the next, so that members
// that hold challenges open cannot keep the leader from checking the others).
type attempt struct {
	at      time.Time
	refused bool
	late    int
	// lateGFLOPS is, after a late answer, the fastest rate that challenge leaves possible
	// (its FLOPs over its timeout): the next challenge is sized for it (sizeChallenge).
	lateGFLOPS float64
}

func newSpeedChecker(n *Node) *speedChecker {
	s := &speedChecker{n: n, log: n.log.With("component", "speedcheck"), last: map[peer.ID]attempt{}}
	s.prover = speedproof.NewProver(speedproof.ProverConfig{Allow: s.isLeader, Claim: s.ownClaim, Log: n.log})
	s.proofs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshnode_speed_proofs_total",
		Help: "Challenges of members' claimed compute speed this node made as the Raft leader, by result: proved, wrong (a lie), timeout, refused, unverifiable.",
	}, []string{"result"})
	n.reg.MustRegister(s.proofs)
	return s
}

// isLeader allows only the current Raft leader to challenge this node.
func (s *speedChecker) isLeader(p peer.ID) bool {
	c := s.n.Consensus()
	return c != nil && p != "" && c.Leader() == p
}

// ownClaim is the speed this node's profile claims, what the leader sizes its challenges
// and their timeout for.
func (s *speedChecker) ownClaim() float64 {
	if p := s.n.mesh.Profile(); p != nil {
		return proofClaim(p)
	}
	return 0
}

func (s *speedChecker) Name() string { return "speed check" }

func (s *speedChecker) Start(context.Context) error {
	serve := s.prover.HandleStream
	if s.n.cfg.speedProver != nil {
		serve = s.n.cfg.speedProver
	}
	s.n.mesh.Handle(speedproof.ProtocolID, serve)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.loop()
	return nil
}

func (s *speedChecker) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

func (s *speedChecker) loop() {
	defer s.wg.Done()
	t := time.NewTicker(speedCheckTick)
	defer t.Stop()
	for {
		if c := s.n.Consensus(); c != nil && c.IsLeader() {
			s.pass(c)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass challenges the members that need a proof, and forgets its challenges of peers no
// longer in the peer table. Members that announce the same Host are challenged one after
// the other, members of different hosts concurrently, at most maxChallenges at once.
func (s *speedChecker) pass(c *consensus.Consensus) {
	peers := s.n.mesh.Peers()
	s.forgetAllBut(peers)
	now := time.Now()
	var due []mesh.PeerInfo
	for _, pi := range peers {
		if pi.State != mesh.StateAlive || planProfile(pi.Profile) == nil {
			continue
		}
		proof, ok := c.FSM().SpeedProof(pi.ID.String())
		s.mu.Lock()
		last := s.last[pi.ID]
		s.mu.Unlock()
		if needsProof(pi.Profile, proof, ok, last, now, s.retry()) {
			due = append(due, pi)
		}
	}
	sem := make(chan struct{}, maxChallenges)
	var wg sync.WaitGroup
	for _, group := range byHost(due) {
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for _, pi := range group {
				if s.ctx.Err() != nil || !c.IsLeader() {
					return
				}
				s.challenge(c, pi.ID, pi.Profile)
			}
		}()
	}
	wg.Wait()
}

// maxChallenges bounds the challenges in flight at once. Members on different machines
// compute their answers on their own cores, so proving them one at a time only adds up
// their round trips (0.3 s at the claim, up to max(5 s, 4× that) for a late one, which
// kept every other member waiting behind it); the leader's own cost is recomputing 8
// rows per answer (about 50 ms of a 2 vCPU host). The bound keeps that, and the streams
// open, small when many members join at once or several hold their challenges until the
// timeout.
const maxChallenges = 4

// byHost groups members by the Host their profiles announce, in the order of their first
// member; a member without a Host is a group of its own. Members of one group share a
// machine's cores: challenged at the same time, each would prove a fraction of its speed
// (proved rates cap what it is planned with), so a group is challenged in turn.
func byHost(members []mesh.PeerInfo) [][]mesh.PeerInfo {
	var out [][]mesh.PeerInfo
	index := map[string]int{}
	for _, pi := range members {
		h := pi.Profile.Host
		if i, ok := index[h]; ok && h != "" {
			out[i] = append(out[i], pi)
			continue
		}
		index[h] = len(out)
		out = append(out, []mesh.PeerInfo{pi})
	}
	return out
}

func (s *speedChecker) forgetAllBut(peers []mesh.PeerInfo) {
	keep := make(map[peer.ID]bool, len(peers))
	for _, pi := range peers {
		keep[pi.ID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.last {
		if !keep[id] {
			delete(s.last, id)
		}
	}
}

// needsProof says whether a member announcing p is challenged now, given its latest proof
// (ok false: none) and this node's last challenge of it: without a proof; with one that
// proved nothing without a lie; or when its claim changed since its proof and the proof
// caps what it is planned with. Never twice within base (speedRetry, shorter in tests),
// doubled for each further late answer in a row; speedRetryRefused after a refusal;
// speedRetryAfterLie after a lie.
func needsProof(p *mesh.Profile, proof consensus.SpeedProof, ok bool, last attempt, now time.Time, base time.Duration) bool {
	retry := base
	switch {
	case ok && proof.Wrong:
		retry = speedRetryAfterLie
	case last.refused:
		retry = speedRetryRefused
	case last.late > 0:
		retry = min(speedRetryAfterLie, base<<min(last.late-1, 10))
	}
	if !last.at.IsZero() && now.Sub(last.at) < retry {
		return false
	}
	claim := proofClaim(p)
	switch {
	case !ok:
		return true
	case proof.Wrong:
		return claim != proof.ClaimGFLOPS
	case proof.GFLOPS == 0:
		return true
	}
	return claim != proof.ClaimGFLOPS && fingerprint.ComputeGFLOPS(p) > proof.GFLOPS
}

// retry is the least time between two challenges of one member (needsProof's base).
func (s *speedChecker) retry() time.Duration {
	if s.n.cfg.speedRetry > 0 {
		return s.n.cfg.speedRetry
	}
	return speedRetry
}

// proofClaim is the speed a challenge is sized for: the larger of the profile's GEMM and
// training rates (the chain is a GEMM at the profile's shape).
func proofClaim(p *mesh.Profile) float64 { return max(p.GemmGFLOPS, fingerprint.ComputeGFLOPS(p)) }

// challenge sends id one challenge sized for its claim (smaller after a late answer:
// sizeChallenge) and commits what it proved.
func (s *speedChecker) challenge(c *consensus.Consensus, id peer.ID, p *mesh.Profile) {
	s.mu.Lock()
	prev := s.last[id]
	s.last[id] = attempt{at: time.Now()}
	s.mu.Unlock()
	claim := proofClaim(p)
	target := speedProofTarget
	if s.n.cfg.speedProofTarget > 0 {
		target = s.n.cfg.speedProofTarget
	}
	ch, timeout := sizeChallenge(claim, prev, target)
	ctx, cancel := context.WithTimeout(s.ctx, timeout+5*time.Second) // + the stream's opening
	defer cancel()
	res, err := s.verify(ctx, id, ch, timeout)
	log := s.log.With("peer", id, "claim_gflops", claim, "flops", ch.FLOPs())
	if prev.late > 0 {
		log = log.With("late_before", prev.late)
	}
	proof := consensus.SpeedProof{ID: id.String(), ClaimGFLOPS: min(claim, records.MaxProfileGFLOPS)}
	result := proofProved
	switch {
	case err == nil:
		proof.GFLOPS = min(res.GFLOPS, records.MaxProfileGFLOPS)
		log.Info("speed proved", "gflops", res.GFLOPS, "round_trip", res.RoundTrip, "path", res.Path)
	case errors.Is(err, speedproof.ErrWrongAnswer):
		result, proof.Wrong = proofWrong, true
		log.Warn("wrong answer to a speed challenge: the member lied, it is left out of plans", "err", err)
	case errors.Is(err, speedproof.ErrPathUnknown):
		s.proofs.WithLabelValues(proofUnverifiable).Inc() // retried after speedRetry
		log.Warn("speed challenge answered on a kernel path this node cannot check", "err", err)
		return
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errAnswerLate):
		result = proofTimeout
		log.Warn("no answer to a speed challenge in time: it proved nothing", "timeout", timeout, "err", err)
		s.mu.Lock()
		s.last[id] = attempt{at: s.last[id].at, late: prev.late + 1, lateGFLOPS: ch.FLOPs() / timeout.Seconds() / 1e9}
		s.mu.Unlock()
	default:
		if s.ctx.Err() == nil {
			s.proofs.WithLabelValues(proofRefused).Inc()
			log.Debug("speed challenge not answered", "err", err)
			s.mu.Lock()
			s.last[id] = attempt{at: time.Now(), refused: true}
			s.mu.Unlock()
		}
		return
	}
	s.proofs.WithLabelValues(result).Inc()
	if err := c.RecordSpeedProof(s.ctx, proof); err != nil && s.ctx.Err() == nil {
		log.Warn("commit speed proof", "err", err)
	}
}

// sizeChallenge sizes the challenge of a member claiming claim GFLOP/s, and the time it is
// given: target at the claim; after a challenge it left unanswered until its timeout
// (last.late), for the fastest rate that one leaves possible (last.lateGFLOPS), so that
// an honest member on a busy host, which could not answer one sized for its idle claim,
// proves the lower bound it can instead of nothing again. (A testnet member on a loaded
// CI host, claiming 248 GFLOP/s, left two challenges of 7.5e10 FLOP in a row unanswered
// for 5 s, so it computed below 15; its job, which needed every member, failed "no
// feasible plan". Its neighbour proved 11.5 GFLOP/s.) The timeout stays the claim's
// (speedproof.Timeout): a smaller challenge buys no more time, and what it proves caps
// the claim as any proof does (ProofSlack).
func sizeChallenge(claim float64, last attempt, target time.Duration) (speedproof.Challenge, time.Duration) {
	sizeFor := claim
	if last.late > 0 && last.lateGFLOPS > 0 {
		sizeFor = min(claim, last.lateGFLOPS)
	}
	ch := speedproof.Size(sizeFor, target)
	return ch, speedproof.Timeout(ch, claim)
}

// errAnswerLate is a stream read that failed on its deadline.
var errAnswerLate = errors.New("answer late")

func (s *speedChecker) verify(ctx context.Context, id peer.ID, ch speedproof.Challenge, timeout time.Duration) (speedproof.Result, error) {
	st, err := s.n.mesh.NewStream(ctx, id, speedproof.ProtocolID)
	if err != nil {
		return speedproof.Result{}, err
	}
	start := time.Now()
	res, err := speedproof.Verify(ctx, st, ch, timeout, nil)
	if err != nil && !errors.Is(err, speedproof.ErrWrongAnswer) && time.Since(start) >= timeout {
		err = errors.Join(errAnswerLate, err)
	}
	if err != nil {
		_ = st.Reset()
		return res, err
	}
	_ = st.Close()
	return res, nil
}

// proofPending says whether a peer's plan waits for a proof of its speed: its profile
// could be planned, it is not trusted, and the leader has committed no proof of it yet
// (not challenged yet, or a challenge in flight or refused and retried), or only one that
// proved nothing after a single late answer (late: this leader's count of its challenges
// in a row left unanswered until their timeout), which the leader retries after
// speedRetry with a smaller challenge (sizeChallenge). An honest member on a busy host
// can miss one timeout (a testnet's third node did, and a job that needed all three
// failed "no feasible plan" at once); a lie, or a second late answer in a row, is final
// for planning: that peer is out of plans. A member that never answers delays each job's
// first plan by at most scheduler.Config.ProofWait, as one that refuses every challenge
// always could.
func proofPending(p *mesh.Profile, proof consensus.SpeedProof, ok, trusted bool, late int) bool {
	if trusted || planProfile(p) == nil {
		return false
	}
	return !ok || !proof.Wrong && !(proof.GFLOPS > 0) && late <= 1
}

// lateAnswers is how many challenges in a row id left unanswered until their timeout, as
// this node (when it leads) counts them; 0 on a nil checker.
func (s *speedChecker) lateAnswers(id peer.ID) int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[id].late
}

// ProofSlack is how far above what a member proved its claimed speed is believed. A proof
// is a lower bound on the member's speed measured in wall-clock time at one moment (it
// cannot answer faster than it computes), while a claim is the profile's rate per CPU
// second the process got: an honest member whose host is busy proves a fraction of its
// claim (0.12–0.29 of it in quick starts at load average 7–17 on the 2-vCPU development
// machine; 0.7–0.9 when idle). Four believes a host up to 4× oversubscribed while bounding
// a liar's first plan at 4× its real speed, until its measured steps recalibrate it.
const ProofSlack = 4

// provenProfile is what the balancer may plan a peer with: its profile's speed capped by
// slack × what it proved (nil without a proof, or one that proved nothing), unless
// trusted (this node itself, or the Raft leader, which no one challenges). slack is
// ProofSlack but in tests (Config.speedProofSlack; zero means ProofSlack).
func provenProfile(p *mesh.Profile, proof consensus.SpeedProof, ok, trusted bool, slack float64) *scheduler.Profile {
	pp := planProfile(p)
	if pp == nil || trusted {
		return pp
	}
	if !ok || !(proof.GFLOPS > 0) {
		return nil
	}
	if !(slack > 0) {
		slack = ProofSlack
	}
	pp.GFLOPS = math.Min(pp.GFLOPS, max(1, slack)*proof.GFLOPS)
	return pp
}

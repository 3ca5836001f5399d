package node

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node/fingerprint"
	"github.com/meshnode/meshnode/node/speedproof"
	"github.com/meshnode/meshnode/scheduler"
)

// claiming makes a test node's profile claim gflops for both of its compute rates.
func claiming(gflops float64) func(*fingerprint.Profiler) {
	return func(p *fingerprint.Profiler) {
		shareFirstMeasurement(p)
		p.WrapCompute(func(h fingerprint.ComputeHooks) fingerprint.ComputeHooks {
			h.Gemm = func(int, int, int, int, time.Duration) float64 { return gflops }
			h.Train = func(time.Duration, func() float64) (float64, float64, float64) { return gflops, gflops, 0 }
			return h
		})
	}
}

// neverAnswer holds every challenge open without answering until done is closed: a
// member whose device is far slower than it claims (its real prover gives up once the
// answer would be late; on a quiet machine it may also prove its real speed in time).
func neverAnswer(done <-chan struct{}) network.StreamHandler {
	return func(s network.Stream) {
		<-done
		_ = s.Reset()
	}
}

// nodeByID is the node of nodes with ID id, nil if none.
func nodeByID(id string, nodes ...*Node) *Node {
	for _, n := range nodes {
		if n.ID().String() == id {
			return n
		}
	}
	return nil
}

// answerWrongly answers every challenge with made-up row hashes.
func answerWrongly(s network.Stream) {
	defer s.Close()
	c, err := speedproof.ReadChallenge(s)
	if err != nil {
		_ = s.Reset()
		return
	}
	b, _ := speedproof.Answer{Path: kernels.GemmName(), Hashes: make([]byte, c.Rows*speedproof.RowHashSize)}.MarshalBinary()
	_, _ = s.Write(b)
}

// TestLiarsAreNotInTheFirstPlan: on a real mesh, the leader challenges every member: an
// honest one proves a speed, one claiming 1e6 GFLOP/s that cannot answer in time proves
// nothing, one that answers with made-up hashes is caught lying (committed, counted in
// meshnode_speed_proofs_total). The first plan of a job submitted then leaves both liars
// out.
func TestLiarsAreNotInTheFirstPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("four in-process nodes; the leader waits 5 s for the liar's answer")
	}
	strict := func(cfg Config) Config { cfg.speedProofSlack = ProofSlack; return cfg } // claims held to proofs, as in production
	first := startNode(t, strict(testConfig(t)))
	honest := startNode(t, strict(testConfig(t, first.Status().Addrs...)))
	fastCfg := strict(testConfig(t, first.Status().Addrs...))
	fastCfg.profilerHook = claiming(1e6)
	fast := startNode(t, fastCfg)
	held := make(chan struct{})
	t.Cleanup(func() { close(held) }) // before the nodes close: cleanups run last first
	fast.mesh.Handle(speedproof.ProtocolID, neverAnswer(held))
	wrong := startNode(t, strict(testConfig(t, first.Status().Addrs...)))
	wrong.mesh.Handle(speedproof.ProtocolID, answerWrongly)

	var leader *Node
	var proofs map[*Node]consensus.SpeedProof
	testutil.WaitFor(t, 60*time.Second, "the leader's proofs of the three members", func() bool {
		leader = nil
		for _, nd := range []*Node{first, honest, fast, wrong} {
			if c := nd.Consensus(); c != nil && c.IsLeader() {
				leader = nd
			}
		}
		if leader == nil {
			return false
		}
		if leader == fast || leader == wrong {
			t.Fatalf("a liar leads: it is trusted, nothing to check (leader %s)", leader.ID())
		}
		proofs = map[*Node]consensus.SpeedProof{}
		for _, nd := range []*Node{first, honest, fast, wrong} {
			if p, ok := leader.Consensus().FSM().SpeedProof(nd.ID().String()); ok && nd != leader {
				proofs[nd] = p
			}
		}
		return len(proofs) == 3
	})
	other := first
	if leader == first {
		other = honest
	}
	if p := proofs[other]; p.Wrong || !(p.GFLOPS > 0) {
		t.Fatalf("the honest member proved nothing: %+v", p)
	}
	t.Logf("honest member: claimed %.1f GFLOP/s, proved %.1f", proofs[other].ClaimGFLOPS, proofs[other].GFLOPS)
	if p := proofs[fast]; p.Wrong || p.GFLOPS != 0 || p.ClaimGFLOPS != 1e6 {
		t.Fatalf("the member claiming 1e6 GFLOP/s: %+v", p)
	}
	if p := proofs[wrong]; !p.Wrong || p.GFLOPS != 0 {
		t.Fatalf("the member answering wrongly: %+v", p)
	}
	for _, p := range leader.Peers() { // GET /v1/peers
		if want, ok := proofs[nodeByID(p.ID, first, honest, fast, wrong)]; ok && (p.ProvedGFLOPS == nil || *p.ProvedGFLOPS != want.GFLOPS || p.SpeedLie != want.Wrong) {
			t.Errorf("peer %s: proved_gflops %v, speed_lie %v; the FSM holds %+v", p.ID, p.ProvedGFLOPS, p.SpeedLie, want)
		}
	}
	text := scrape(t, leader)
	for _, series := range []string{`meshnode_speed_proofs_total{result="proved"}`, `meshnode_speed_proofs_total{result="wrong"}`, `meshnode_speed_proofs_total{result="timeout"}`} {
		if metricValue(t, text, series) < 1 {
			t.Errorf("%s not counted", series)
		}
	}

	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "the liar claims a million GFLOP/s\n", 400)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.Warmup, spec.Train.EvalEvery = 4, 8, 1, 2
	id := submitThroughAPI(t, honest, spec)
	var job consensus.Job
	testutil.WaitFor(t, 60*time.Second, "the job's first plan", func() bool {
		var err error
		job, _, err = leader.Consensus().Job(context.Background(), id, false)
		return err == nil && len(job.Plans) > 0
	})
	var jp scheduler.JobPlan
	if err := json.Unmarshal(job.Plans[0].Plan, &jp); err != nil {
		t.Fatal(err)
	}
	for _, liar := range []*Node{fast, wrong} {
		if jp.Has(liar.ID().String()) {
			t.Fatalf("liar %s is in the first plan %+v", liar.ID(), jp.Replicas)
		}
	}
	for _, n := range jp.Inputs.Snapshot.Nodes {
		if n.ID == fast.ID().String() || n.ID == wrong.ID().String() {
			t.Fatalf("a liar was offered to the balancer: %+v", n)
		}
	}
}

// TestNeedsProof: who the leader challenges, and when not again.
func TestNeedsProof(t *testing.T) {
	now := time.Now()
	p := &mesh.Profile{GemmGFLOPS: 100, TrainGFLOPS: 40}
	proved := consensus.SpeedProof{ClaimGFLOPS: 100, GFLOPS: 90}
	for _, tc := range []struct {
		name  string
		p     *mesh.Profile
		proof consensus.SpeedProof
		ok    bool
		last  attempt
		want  bool
	}{
		{"never proved", p, consensus.SpeedProof{}, false, attempt{}, true},
		{"never proved, refused a moment ago", p, consensus.SpeedProof{}, false, attempt{at: now.Add(-time.Second), refused: true}, false},
		{"never proved, refused a while ago", p, consensus.SpeedProof{}, false, attempt{at: now.Add(-speedRetryRefused), refused: true}, true},
		{"proved its claim", p, proved, true, attempt{at: now.Add(-time.Hour)}, false},
		{"claims more than it proved, same claim", &mesh.Profile{GemmGFLOPS: 100, TrainGFLOPS: 95}, proved, true, attempt{at: now.Add(-time.Hour)}, false},
		{"claims more now", &mesh.Profile{GemmGFLOPS: 300, TrainGFLOPS: 120}, proved, true, attempt{at: now.Add(-time.Hour)}, true},
		{"claims more now, challenged a moment ago", &mesh.Profile{GemmGFLOPS: 300, TrainGFLOPS: 120}, proved, true, attempt{at: now.Add(-time.Second)}, false},
		{"claims less now", &mesh.Profile{GemmGFLOPS: 50, TrainGFLOPS: 20}, proved, true, attempt{at: now.Add(-time.Hour)}, false},
		{"proved nothing in time", p, consensus.SpeedProof{ClaimGFLOPS: 100}, true, attempt{at: now.Add(-speedRetry), late: 1}, true},
		{"proved nothing in time, thrice", p, consensus.SpeedProof{ClaimGFLOPS: 100}, true, attempt{at: now.Add(-3 * speedRetry), late: 3}, false},
		{"proved nothing in time, thrice, long ago", p, consensus.SpeedProof{ClaimGFLOPS: 100}, true, attempt{at: now.Add(-4 * speedRetry), late: 3}, true},
		{"lied, same claim", p, consensus.SpeedProof{ClaimGFLOPS: 100, Wrong: true}, true, attempt{}, false},
		{"lied, new claim within the hour", &mesh.Profile{GemmGFLOPS: 101}, consensus.SpeedProof{ClaimGFLOPS: 100, Wrong: true}, true, attempt{at: now.Add(-time.Minute)}, false},
		{"lied, new claim after the hour", &mesh.Profile{GemmGFLOPS: 101}, consensus.SpeedProof{ClaimGFLOPS: 100, Wrong: true}, true, attempt{at: now.Add(-speedRetryAfterLie)}, true},
	} {
		if got := needsProof(tc.p, tc.proof, tc.ok, tc.last, now, speedRetry); got != tc.want {
			t.Errorf("%s: needsProof = %v", tc.name, got)
		}
	}
}

// TestChallengeGroupsShareAHost: members that announce the same Host are challenged in
// one group, in turn (concurrent challenges on shared cores would each prove a fraction
// of the speed); members without a Host, or on other hosts, each make a group of their own.
func TestChallengeGroupsShareAHost(t *testing.T) {
	pi := func(id, host string) mesh.PeerInfo {
		return mesh.PeerInfo{ID: peer.ID(id), Profile: &mesh.Profile{Host: host}}
	}
	in := []mesh.PeerInfo{pi("a", "h1"), pi("b", ""), pi("c", "h2"), pi("d", "h1"), pi("e", ""), pi("f", "h2")}
	var got [][]string
	for _, g := range byHost(in) {
		var ids []string
		for _, p := range g {
			ids = append(ids, string(p.ID))
		}
		got = append(got, ids)
	}
	want := [][]string{{"a", "d"}, {"b"}, {"c", "f"}, {"e"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}

// TestChallengeShrinksAfterALateAnswer: a member that left a challenge sized for its claim
// unanswered until the timeout gets the next one sized for the fastest rate that timeout
// leaves possible, so an honest member on a busy host proves what it computes instead of
// nothing again; the timeout never grows. (A proof forgets the late answers:
// TestSlowMemberProvesWhatItComputesOnTheRetry.)
func TestChallengeShrinksAfterALateAnswer(t *testing.T) {
	const claim, busy = 248.0, 11.0 // GFLOP/s: the idle claim, and what the busy host computes
	target := speedProofTarget
	link := speedproof.Challenge{Rows: speedproof.DefaultRows, Cols: speedproof.DefaultCols, Links: 1}.FLOPs()
	first, timeout := sizeChallenge(claim, attempt{}, target)
	if f, want := first.FLOPs(), claim*1e9*target.Seconds(); f < want || f > want+link {
		t.Fatalf("first challenge: %.3g FLOP, want %.3g (one link more at most)", f, want)
	}
	if timeout != speedproof.MinTimeout {
		t.Fatalf("first challenge's timeout %v, want %v", timeout, speedproof.MinTimeout)
	}
	if took := first.FLOPs() / (busy * 1e9); took <= timeout.Seconds() {
		t.Fatalf("the busy member answers the first challenge in %.1f s: the case is not late", took)
	}
	last := attempt{late: 1, lateGFLOPS: first.FLOPs() / timeout.Seconds() / 1e9}
	retry, retryTimeout := sizeChallenge(claim, last, target)
	if f, want := retry.FLOPs(), last.lateGFLOPS*1e9*target.Seconds(); f < want || f > want+link {
		t.Fatalf("retry after a late answer: %.3g FLOP, want %.3g, sized for %.3g GFLOP/s", f, want, last.lateGFLOPS)
	}
	if retryTimeout != timeout {
		t.Fatalf("retry's timeout %v, want the claim's %v", retryTimeout, timeout)
	}
	if took := retry.FLOPs() / (busy * 1e9); took > retryTimeout.Seconds() {
		t.Fatalf("the busy member needs %.1f s for the retry too, given %v", took, retryTimeout)
	}
	again, _ := sizeChallenge(claim, attempt{late: 2, lateGFLOPS: retry.FLOPs() / timeout.Seconds() / 1e9}, target)
	if again.FLOPs() >= retry.FLOPs() && retry.Links > 1 {
		t.Fatalf("a second late answer: %.3g FLOP, no smaller than the retry's %.3g", again.FLOPs(), retry.FLOPs())
	}
	// A claim that dropped below the late rate since: sized for the claim.
	lower, _ := sizeChallenge(10, attempt{late: 1, lateGFLOPS: 15}, target)
	if want := speedproof.Size(10, target); lower.Links != want.Links {
		t.Fatalf("a claim below the late rate: %d links, want the claim's %d", lower.Links, want.Links)
	}
	// A member claiming far more than it has gets smaller challenges, never more time.
	huge, hugeTimeout := sizeChallenge(1e6, attempt{late: 1, lateGFLOPS: 110}, target)
	if hugeTimeout != speedproof.MinTimeout || huge.FLOPs() > 110e9*target.Seconds()+link {
		t.Fatalf("claim 1e6 after a late answer: %.3g FLOP in %v", huge.FLOPs(), hugeTimeout)
	}
}

// pacedProver answers challenges as a device computing gflops would: a correct answer
// once the chain's FLOPs at that rate have passed since the challenge arrived, or, where
// that is later than the verifier waits at claim GFLOP/s, nothing (the stream reset then,
// as the real prover gives up).
func pacedProver(gflops, claim float64, done <-chan struct{}) network.StreamHandler {
	return func(s network.Stream) {
		c, err := speedproof.ReadChallenge(s)
		if err != nil {
			_ = s.Reset()
			return
		}
		start := time.Now()
		need := time.Duration(c.FLOPs() / (gflops * 1e9) * float64(time.Second))
		giveUp := speedproof.Timeout(c, claim)
		var hashes []byte
		var path string
		ok := false
		if need <= giveUp {
			hashes, path, ok = speedproof.SolveUntil(c, start.Add(giveUp))
		}
		wait := time.NewTimer(time.Until(start.Add(min(need, giveUp))))
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-done:
		}
		if !ok || need > giveUp {
			_ = s.Reset()
			return
		}
		b, _ := speedproof.Answer{Path: path, Hashes: hashes}.MarshalBinary()
		_, _ = s.Write(b)
		_ = s.Close()
	}
}

// TestSlowMemberProvesWhatItComputesOnTheRetry: on a real mesh, a member that computes
// far below its claim (4 GFLOP/s of 1e6 claimed: an inflated claim, or a busy host) cannot
// answer the first challenge, sized for the claim, in time; the leader's retry is sized
// for the rate that timeout left possible, and the member proves about what it computes,
// where an equal retry would be late again and leave it unproven (out of plans).
func TestSlowMemberProvesWhatItComputesOnTheRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("two in-process nodes; the leader waits 5 s for the first answer")
	}
	const rate, claim = 4.0, 1e6
	held := make(chan struct{})
	t.Cleanup(func() { close(held) }) // before the nodes close: cleanups run last first
	quickRetry := func(cfg Config) Config { cfg.speedRetry = 200 * time.Millisecond; return cfg }
	leader := startNode(t, quickRetry(testConfig(t)))
	slowCfg := quickRetry(testConfig(t, leader.Status().Addrs...))
	slowCfg.profilerHook = claiming(claim)
	slowCfg.speedProver = pacedProver(rate, claim, held)
	slow := startNode(t, slowCfg)

	var proof consensus.SpeedProof
	testutil.WaitFor(t, 60*time.Second, "a proof of the slow member's speed", func() bool {
		c := leader.Consensus()
		if c == nil || !c.IsLeader() {
			return false
		}
		var ok bool
		proof, ok = c.FSM().SpeedProof(slow.ID().String())
		return ok && proof.GFLOPS > 0
	})
	if proof.Wrong || proof.GFLOPS > rate*1.001 || proof.ClaimGFLOPS != claim {
		t.Fatalf("the slow member's proof %+v: want at most its %.0f GFLOP/s, claim %.0g", proof, rate, claim)
	}
	if got := metricValue(t, scrape(t, leader), `meshnode_speed_proofs_total{result="timeout"}`); got < 1 {
		t.Fatalf("%v late answers counted: the first challenge, sized for the claim, was answered in time", got)
	}
	if late := leader.speed.lateAnswers(slow.ID()); late != 0 {
		t.Fatalf("%d late answers still counted after the proof", late)
	}
	t.Logf("claimed %.0g GFLOP/s, computes %.0f, proved %.2f on the retry", claim, rate, proof.GFLOPS)
}

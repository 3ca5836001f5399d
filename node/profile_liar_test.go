package node

import (
	"crypto/rand"
	"math"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node/speedproof"
	"github.com/meshnode/meshnode/scheduler"
)

func newPeerID(t *testing.T) string {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	return id.String()
}

// TestLyingProfileIsNotPlanned: issue 25's lying profiles (gemm_gflops 1e300, which became
// +Inf; memory_budget_bytes 2^64−1, which was cast to −1; a link with rtt −1) made every
// new job fail "no feasible plan", whether the liar would have been used or not. Each is
// now dropped from the snapshot: the honest members are planned and the liar is not.
func TestLyingProfileIsNotPlanned(t *testing.T) {
	a, b, liar := newPeerID(t), newPeerID(t), newPeerID(t)
	honest := func(self, other string) *mesh.Profile {
		return &mesh.Profile{GemmGFLOPS: 50, Cores: 4, MemoryBudgetBytes: 4 << 30, DataAddr: "127.0.0.1:1",
			Links: []mesh.ProfileLink{{Peer: other, RTTSeconds: 1e-3, BandwidthBps: 1e9}}}
	}
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	for name, lie := range map[string]func(*mesh.Profile){
		"gemm_gflops 1e300":          func(p *mesh.Profile) { p.GemmGFLOPS = 1e300 },
		"memory_budget_bytes 2^64-1": func(p *mesh.Profile) { p.MemoryBudgetBytes = math.MaxUint64 },
		"link rtt -1":                func(p *mesh.Profile) { p.Links = []mesh.ProfileLink{{Peer: a, RTTSeconds: -1, BandwidthBps: 1e9}} },
		"link bandwidth 1e-300":      func(p *mesh.Profile) { p.Links = []mesh.ProfileLink{{Peer: a, RTTSeconds: 1e-3, BandwidthBps: 1e-300}} },
		"train_gflops 1e300":         func(p *mesh.Profile) { p.TrainGFLOPS = 1e300 },
	} {
		t.Run(name, func(t *testing.T) {
			lp := honest(liar, a)
			lie(lp)
			members := []scheduler.Member{
				{ID: a, State: scheduler.MemberAlive, Profile: planProfile(honest(a, b))},
				{ID: b, State: scheduler.MemberAlive, Profile: planProfile(honest(b, a))},
				{ID: liar, State: scheduler.MemberAlive, Profile: planProfile(lp)},
			}
			plan, err := scheduler.PlanJob(spec, members, schedulerConfig())
			if err != nil {
				t.Fatalf("one lying member failed the job: %v", err)
			}
			if plan.Has(liar) {
				t.Fatalf("the liar is in the plan %+v", plan)
			}
		})
	}
}

// provedHere is the speed this machine proves on a small challenge, as a member would
// answer the leader's: what a liar claiming more than its device really has.
func provedHere(t *testing.T) float64 {
	t.Helper()
	c := speedproof.Size(1, time.Second) // one link of the default shape
	start := time.Now()
	hashes, path := speedproof.Solve(c)
	rate := speedproof.Rate(c, time.Since(start))
	if err := speedproof.Check(c, speedproof.Answer{Path: path, Hashes: hashes}, nil); err != nil || rate <= 0 {
		t.Fatalf("this machine's own answer: %v (%.3g GFLOP/s)", err, rate)
	}
	return rate
}

// TestFastLiarIsPricedAtWhatItProved: issue 25's "a lying fast profile still wins its
// first epoch": a member claiming 1e6 GFLOP/s (inside every bound) was priced at its
// claim and given the layers until measured steps showed otherwise. Members are now
// priced at min(claimed, ProofSlack × proved): without a proof, with one that timed out or was wrong,
// or with its real speed proved, the liar is not in the first plan, while two honest
// members that proved 100× faster devices are.
func TestFastLiarIsPricedAtWhatItProved(t *testing.T) {
	leader, b, liar := newPeerID(t), newPeerID(t), newPeerID(t)
	real := provedHere(t)
	fast := 100 * real
	profile := func(gflops float64, other string) *mesh.Profile {
		return &mesh.Profile{GemmGFLOPS: gflops, TrainGFLOPS: gflops, Cores: 4, MemoryBudgetBytes: 4 << 30, DataAddr: "127.0.0.1:1",
			Links: []mesh.ProfileLink{{Peer: other, RTTSeconds: 1e-3, BandwidthBps: 1e9}}}
	}
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 4, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	for name, tc := range map[string]struct {
		proof consensus.SpeedProof
		ok    bool
	}{
		"no proof yet":          {},
		"no answer in time":     {consensus.SpeedProof{ClaimGFLOPS: 1e6}, true},
		"a wrong answer":        {consensus.SpeedProof{ClaimGFLOPS: 1e6, Wrong: true}, true},
		"its real speed proved": {consensus.SpeedProof{ClaimGFLOPS: 1e6, GFLOPS: real}, true},
	} {
		t.Run(name, func(t *testing.T) {
			honest := consensus.SpeedProof{ClaimGFLOPS: fast, GFLOPS: fast}
			members := []scheduler.Member{
				{ID: leader, State: scheduler.MemberAlive, Profile: provenProfile(profile(fast, b), consensus.SpeedProof{}, false, true, ProofSlack)},
				{ID: b, State: scheduler.MemberAlive, Profile: provenProfile(profile(fast, leader), honest, true, false, ProofSlack)},
				{ID: liar, State: scheduler.MemberAlive, Profile: provenProfile(profile(1e6, leader), tc.proof, tc.ok, false, ProofSlack)},
			}
			plan, err := scheduler.PlanJob(spec, members, schedulerConfig())
			if err != nil {
				t.Fatal(err)
			}
			if plan.Has(liar) {
				t.Fatalf("the liar (claims 1e6 GFLOP/s, proved %.3g) is in the plan %+v", tc.proof.GFLOPS, plan.Replicas)
			}
			if !plan.Has(b) && !plan.Has(leader) {
				t.Fatalf("no honest member in the plan %+v", plan.Replicas)
			}
		})
	}
	if p := provenProfile(profile(fast, leader), consensus.SpeedProof{GFLOPS: 0.3 * fast}, true, false, 0); p.GFLOPS != fast {
		t.Fatalf("an honest member on a busy host that proved 30%% of its claim is priced at %.3g of %.3g", p.GFLOPS, fast)
	}
	if p := provenProfile(profile(1e6, leader), consensus.SpeedProof{GFLOPS: real}, true, false, 0); p.GFLOPS != ProofSlack*real {
		t.Fatalf("a liar that proved %.3g is priced at %.3g, want %d× its proof", real, p.GFLOPS, ProofSlack)
	}
}

// TestProofPending: a peer's first plan waits for its proof while the leader has
// committed none for a profile it could plan on, or only one late answer (0) that it
// retries; a lie or a second late answer in a row is final for planning, a rate is a
// proof, the leader is trusted, and an unplannable profile has nothing to prove.
func TestProofPending(t *testing.T) {
	p := &mesh.Profile{GemmGFLOPS: 100, TrainGFLOPS: 100, Cores: 4, MemoryBudgetBytes: 4 << 30, DataAddr: "127.0.0.1:1",
		Links: []mesh.ProfileLink{{Peer: newPeerID(t), RTTSeconds: 1e-3, BandwidthBps: 1e9}}}
	rate, late, lie := consensus.SpeedProof{GFLOPS: 30}, consensus.SpeedProof{}, consensus.SpeedProof{Wrong: true}
	for _, tc := range []struct {
		name        string
		p           *mesh.Profile
		proof       consensus.SpeedProof
		ok, trusted bool
		late        int
		want        bool
	}{
		{"no proof yet", p, consensus.SpeedProof{}, false, false, 0, true},
		{"a rate", p, rate, true, false, 0, false},
		{"one late answer, its retry due", p, late, true, false, 1, true},
		{"one late answer, its retry in flight", p, late, true, false, 0, true},
		{"two late answers in a row", p, late, true, false, 2, false},
		{"a lie", p, lie, true, false, 0, false},
		{"the leader", p, consensus.SpeedProof{}, false, true, 0, false},
		{"no plannable profile", &mesh.Profile{}, consensus.SpeedProof{}, false, false, 0, false},
		{"no profile", nil, consensus.SpeedProof{}, false, false, 0, false},
	} {
		if got := proofPending(tc.p, tc.proof, tc.ok, tc.trusted, tc.late); got != tc.want {
			t.Errorf("%s: pending %v, want %v", tc.name, got, tc.want)
		}
	}
}

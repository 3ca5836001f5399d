package node

import (
	"crypto/rand"
	"math"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
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

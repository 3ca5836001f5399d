package mesh

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
)

func TestMeshHeartbeatsProbesAndDeath(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	a.SetProfile(Profile{GemmGFLOPS: 10, Cores: 2, GPUs: []GPU{}})
	b := startMesh(t, testConfig(t, testSecret, a))
	b.SetProfile(Profile{GemmGFLOPS: 20, Cores: 4})
	c := startMesh(t, testConfig(t, testSecret, a))
	c.SetProfile(Profile{GemmGFLOPS: 30, Cores: 8})
	all := []*Mesh{a, b, c}
	testutil.WaitFor(t, 10*time.Second, "every node lists the others alive with profiles and links", func() bool {
		for _, m := range all {
			ps := m.Peers()
			if len(ps) != 2 {
				return false
			}
			for _, p := range ps {
				if p.State != StateAlive || p.Profile == nil || p.Link.RTT == 0 || p.Link.BandwidthBps == 0 {
					return false
				}
			}
		}
		return true
	})
	// b and c found each other through a: they are now directly connected.
	if !b.IsAdmitted(c.ID()) || !c.IsAdmitted(b.ID()) {
		t.Errorf("b and c are not directly connected and admitted")
	}
	for _, p := range a.Peers() {
		t.Logf("a sees %s: rtt %s bandwidth %.1f MB/s profile %+v", p.ID, p.Link.RTT, p.Link.BandwidthBps/1e6, *p.Profile)
	}
	// A crash: no leave announcement, so death comes from heartbeat age.
	start := time.Now()
	c.noLeave = true
	c.Close()
	testutil.WaitFor(t, 5*time.Second, "c dead at a and b", func() bool {
		return peerState(a, c.ID()) == StateDead && peerState(b, c.ID()) == StateDead
	})
	testutil.Within(t, "c turning dead (dead-after 2 s)", time.Since(start), 3*time.Second)
	if peerState(a, b.ID()) != StateAlive || peerState(b, a.ID()) != StateAlive {
		t.Errorf("a and b stopped seeing each other alive after c died")
	}
	// A clean leave: b announces it and a marks it dead well before dead-after.
	start = time.Now()
	b.Close()
	testutil.WaitFor(t, 5*time.Second, "b dead at a", func() bool { return peerState(a, b.ID()) == StateDead })
	if took := time.Since(start); took >= 2*time.Second {
		t.Errorf("b announced leaving but turned dead only after %s", took)
	}
}

package mesh

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestRestartedMemberReplacesItsDeadConnection: member b stops heartbeating with its
// connection to a still open (a process that hangs or was killed before its connection
// timed out); once a holds it dead, b comes back with the same identity and dials a. a
// closes its connection to the old process, keeps the new one, and hears b alive again.
func TestRestartedMemberReplacesItsDeadConnection(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	cfgB := testConfig(t, testSecret, a)
	b := startMesh(t, cfgB)
	testutil.WaitFor(t, 20*time.Second, "a sees b alive", func() bool { return peerState(a, b.ID()) == StateAlive })
	old := a.host.Network().ConnsToPeer(b.ID())
	if len(old) == 0 {
		t.Fatal("a has no connection to b")
	}
	b.cancel() // b's loops stop: no more heartbeats; its host and connections stay
	testutil.WaitFor(t, 20*time.Second, "a holds b dead", func() bool { return peerState(a, b.ID()) == StateDead })

	cfgB2 := testConfig(t, testSecret, a)
	cfgB2.Identity = cfgB.Identity
	b2 := startMesh(t, cfgB2)
	testutil.WaitFor(t, 20*time.Second, "a hears the restarted b", func() bool { return peerState(a, b2.ID()) == StateAlive })
	testutil.WaitFor(t, 20*time.Second, "a's connections to the old process closed", func() bool {
		for _, c := range old {
			if !c.IsClosed() {
				return false
			}
		}
		return true
	})
}

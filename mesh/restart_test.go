package mesh

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestRestartedMemberReplacesItsDeadConnection: member b stops heartbeating with its
// connection to a still open (a process that hangs or was killed before its connection
// timed out); once a holds it dead, and a's admission window for b has ended, b comes back
// with the same identity and dials a. The restarted b admits a (a answers its auth
// exchange though it decided b's admission long ago), a closes its connection to the old
// process, keeps the new one, and each hears the other alive again.
func TestRestartedMemberReplacesItsDeadConnection(t *testing.T) {
	cfgA := testConfig(t, testSecret)
	cfgA.AuthWindow = 1500 * time.Millisecond // b's restart comes after its end
	told := make(chan time.Time, 16)
	cfgA.OnRestarted = func(p peer.ID, dead time.Time) { told <- dead }
	a := startMesh(t, cfgA)
	cfgB := testConfig(t, testSecret, a)
	b := startMesh(t, cfgB)
	testutil.WaitFor(t, 20*time.Second, "a sees b alive", func() bool { return peerState(a, b.ID()) == StateAlive })
	old := a.host.Network().ConnsToPeer(b.ID())
	if len(old) == 0 {
		t.Fatal("a has no connection to b")
	}
	b.cancel() // b's loops stop: no more heartbeats; its host and connections stay
	testutil.WaitFor(t, 20*time.Second, "a holds b dead", func() bool { return peerState(a, b.ID()) == StateDead })
	testutil.WaitFor(t, 20*time.Second, "a's admission window for b ended", func() bool {
		a.adm.mu.Lock()
		defer a.adm.mu.Unlock()
		st, ok := a.adm.peers[b.ID()]
		return ok && time.Now().After(st.deadline)
	})

	cfgB2 := testConfig(t, testSecret, a)
	cfgB2.Identity = cfgB.Identity
	b2 := startMesh(t, cfgB2)
	select { // a tells its node, whose data plane drops what it had with b's old process
	case dead := <-told:
		if dead.IsZero() || dead.After(time.Now()) {
			t.Fatalf("told b restarted, held dead at %v", dead)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a never told that b restarted")
	}
	testutil.WaitFor(t, 20*time.Second, "the restarted b admits a", func() bool { return b2.adm.isAdmitted(a.ID()) })
	testutil.WaitFor(t, 20*time.Second, "a hears the restarted b", func() bool { return peerState(a, b2.ID()) == StateAlive })
	testutil.WaitFor(t, 20*time.Second, "the restarted b hears a", func() bool { return peerState(b2, a.ID()) == StateAlive })
	testutil.WaitFor(t, 20*time.Second, "a's connections to the old process closed", func() bool {
		for _, c := range old {
			if !c.IsClosed() {
				return false
			}
		}
		return true
	})
}

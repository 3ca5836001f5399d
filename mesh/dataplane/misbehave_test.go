package dataplane

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Issue 25: a peer whose frame the engine judged a protocol violation (an anchor frame of
// the wrong length) failed the receiver's step and kept its connection, to do it again at
// every retry. The engine now reports it (Misbehaved, as parallel.MisbehaviourReporter),
// and the data plane closes its connections as it does a mailbox flooder's, counts it,
// asks the node to close the rest (Config.Disconnect), and keeps serving the others; the
// peer may connect again.
func TestMisbehavingPeerIsDisconnected(t *testing.T) {
	cfgB := dpTestConfig(t, 2)
	var mu sync.Mutex
	var told []string
	cfgB.Disconnect = func(peer, reason string) {
		mu.Lock()
		told = append(told, peer)
		mu.Unlock()
	}
	a, b, c := startDataPlane(t, dpTestConfig(t, 1)), startDataPlane(t, cfgB), startDataPlane(t, dpTestConfig(t, 3))
	for _, d := range []*Plane{a, c} {
		d.SetPeerAddr(b.Self(), b.Addr())
		b.SetPeerAddr(d.Self(), d.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	exchange := func(from *Plane, step uint32) {
		t.Helper()
		f := dpTestFrame(frame.KindReduce, step, 0, dpPayload(uint64(step), 64))
		if err := from.Send(ctx, b.Self(), f); err != nil {
			t.Fatalf("step %d to b: %v", step, err)
		}
		if _, err := b.Recv(ctx, from.Self(), f.Key()); err != nil {
			t.Fatalf("step %d at b: %v", step, err)
		}
		if err := b.Send(ctx, from.Self(), f); err != nil {
			t.Fatalf("step %d from b: %v", step, err)
		}
		if _, err := from.Recv(ctx, b.Self(), f.Key()); err != nil {
			t.Fatalf("step %d back: %v", step, err)
		}
	}
	exchange(a, 1)
	exchange(c, 1)

	b.Misbehaved(a.Self(), "anchors of 3 values, the stage holds 4")
	// Once Misbehaved returns b holds none (before each connection's reader sees its end:
	// CI of 18e26a8 read 1 here after a had seen the close).
	if n := b.openConns(a.Self()); n != 0 {
		t.Errorf("b holds %d connections with the misbehaving peer", n)
	}
	testutil.WaitFor(t, 10*time.Second, "the misbehaving peer to see the disconnection", func() bool { return !dpConnected(a, b.Self()) })
	if got := b.Stats().Misbehaved[a.Self()]; got != 1 {
		t.Errorf("Stats().Misbehaved = %d, want 1", got)
	}
	mu.Lock()
	if len(told) != 1 || told[0] != a.Self() {
		t.Errorf("Config.Disconnect told %v, want the misbehaving peer", told)
	}
	mu.Unlock()
	if !dpConnected(c, b.Self()) || !dpConnected(b, c.Self()) {
		t.Error("the honest peer's connection was closed")
	}
	exchange(c, 2) // b keeps serving the others
	exchange(a, 2) // and the peer, still a member, may connect again
}

// Over the libp2p stream path, the misbehaving peer's streams are reset and their libp2p
// connection closed, as a mailbox flooder's.
func TestMisbehavingPeerOnStreamsIsDisconnected(t *testing.T) {
	a, b, ha, hb := streamPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a.UseStreams(b.Self(), true)
	f := dpTestFrame(frame.KindReduce, 1, 0, []byte("anchors"))
	if err := a.Send(ctx, b.Self(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Recv(ctx, a.Self(), f.Key()); err != nil {
		t.Fatal(err)
	}
	b.Misbehaved(a.Self(), "anchors of the wrong length")
	testutil.WaitFor(t, 10*time.Second, "the libp2p connection closed", func() bool {
		return len(hb.Network().ConnsToPeer(ha.ID())) == 0
	})
	if got := b.Stats().Misbehaved[a.Self()]; got != 1 {
		t.Errorf("Stats().Misbehaved = %d, want 1", got)
	}
}

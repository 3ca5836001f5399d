package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Issue 25: a peer the engine caught breaking the data plane's protocol (the worker's
// parallel.MisbehaviourReporter call on the node's data plane) loses its data-plane and
// its libp2p connections, counted in meshnode_malformed_messages_total and
// meshnode_dataplane_misbehaved_total, and the node keeps running: the peer is heard
// again over both once it reconnects.
func TestMisbehavingDataPlanePeerLosesItsConnections(t *testing.T) {
	nodes := startEngineMesh(t, 2)
	a, b := nodes[0], nodes[1]
	bid := b.ID()
	closed := make(chan struct{}, 16)
	n := &network.NotifyBundle{DisconnectedF: func(_ network.Network, c network.Conn) {
		if c.RemotePeer() == bid {
			closed <- struct{}{}
		}
	}}
	a.mesh.Host().Network().Notify(n)
	defer a.mesh.Host().Network().StopNotify(n)
	before := a.mesh.Stats().Malformed

	a.DataPlane().Misbehaved(bid.String(), "anchors of the wrong length")
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the misbehaving peer's libp2p connection was not closed")
	}
	if got := a.mesh.Stats().Malformed; got != before+1 {
		t.Errorf("malformed messages %d, want %d", got, before+1)
	}
	if v := metricValue(t, scrape(t, a), `meshnode_dataplane_misbehaved_total`); v != 1 {
		t.Errorf("meshnode_dataplane_misbehaved_total = %v, want 1", v)
	}
	// The node keeps running and the peer, still a member, is heard again.
	// A frame b writes before it sees the closed connection is lost with it: each try
	// sends a new one.
	step := uint32(0)
	testutil.WaitFor(t, 30*time.Second, "a frame of the peer received after the disconnection", func() bool {
		step++
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		f := &frame.Frame{Kind: frame.KindScalar, DType: frame.DTypeF32, Job: 7, Epoch: 1, Step: step, Shape: []int{1}, Payload: make([]byte, 4)}
		if err := b.DataPlane().Send(ctx, a.ID().String(), f); err != nil {
			return false
		}
		_, err := a.DataPlane().Recv(ctx, bid.String(), f.Key())
		return err == nil
	})
	testutil.WaitFor(t, 30*time.Second, "the peer admitted again", func() bool { return a.mesh.IsAdmitted(bid) })
}

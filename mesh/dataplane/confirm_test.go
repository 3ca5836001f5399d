package dataplane

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Confirm succeeds only where the peer's own key answers, records nothing, and fails
// within the caller's deadline where nothing answers: the prober relies on all three to
// pick a peer's reachable address among candidates.
func TestDataPlaneConfirm(t *testing.T) {
	a := startDataPlane(t, dpTestConfig(t, 1))
	b := startDataPlane(t, dpTestConfig(t, 2))
	c := startDataPlane(t, dpTestConfig(t, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if err := a.Confirm(ctx, b.Self(), b.Addr()); err != nil {
		t.Fatalf("confirm b at its address: %v", err)
	}
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 1, 0, []byte("x"))); !errors.Is(err, ErrNoPeerAddr) {
		t.Errorf("Confirm recorded an address: Send = %v, want ErrNoPeerAddr", err)
	}
	if err := a.Confirm(ctx, b.Self(), c.Addr()); err == nil {
		t.Error("confirmed b at c's address")
	} else {
		t.Logf("c answering for b refused: %v", err)
	}
	if got := c.Stats().Received; len(got) != 0 {
		t.Errorf("impostor received %v", got)
	}

	// A port where nothing answers: the handshake gets no reply and Confirm ends with ctx.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	if err := a.Confirm(short, b.Self(), silent.LocalAddr().String()); err == nil {
		t.Error("confirmed an address where nothing answers")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("an unanswered confirm took %v with a 300 ms deadline", took)
	}
}

// A peer that cannot be dialled (behind a NAT) but dialled this node is sent to over its
// own connection: Connected says so, and Send needs no address.
func TestDataPlaneSendsOverInboundConnection(t *testing.T) {
	pub := startDataPlane(t, dpTestConfig(t, 1))
	natted := startDataPlane(t, dpTestConfig(t, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if pub.Connected(natted.Self()) {
		t.Fatal("connected before any dial")
	}
	natted.SetPeerAddr(pub.Self(), pub.Addr())
	if err := natted.Send(ctx, pub.Self(), dpTestFrame(frame.KindActivation, 1, 0, []byte("out"))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the inbound connection", func() bool { return pub.Connected(natted.Self()) })
	if err := pub.Send(ctx, natted.Self(), dpTestFrame(frame.KindActivation, 2, 0, []byte("back"))); err != nil {
		t.Fatalf("send back over the inbound connection: %v", err)
	}
	if _, err := natted.Recv(ctx, pub.Self(), frame.Key{Kind: frame.KindActivation, Job: 7, Epoch: 1, Step: 2, Index: 3}); err != nil {
		t.Fatal(err)
	}
}

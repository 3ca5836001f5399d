package mesh

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshnode/meshnode/internal/testutil"
)

func validHeartbeat(t testing.TB) *heartbeat {
	return &heartbeat{
		ID: testPeerID(t).String(), Mesh: "test", Seq: 7, SentAt: 1700000000000,
		Addrs: []string{"/ip4/10.0.0.1/tcp/4242", "/ip4/10.0.0.1/udp/4242/quic-v1"},
		Profile: &Profile{GemmGFLOPS: 42.5, GemmShape: "2048x512x512", Cores: 8, MemoryBudgetBytes: 1 << 30,
			GPUs: []GPU{{Name: "A100", MemoryTotalBytes: 40 << 30, Multiprocessors: 108}}, OS: "linux", Arch: "amd64",
			DataAddr: "10.0.0.1:4243", DataAddrs: []string{"10.0.0.1:4243", "[2001:db8::1]:4243", "127.0.0.1:4243"}},
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	hb := validHeartbeat(t)
	b, err := encodeHeartbeat(hb)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != hb.ID || got.Seq != hb.Seq || len(got.Addrs) != 2 || got.Profile.GPUs[0].Multiprocessors != 108 {
		t.Errorf("round trip changed the heartbeat: %+v", got)
	}
}

func TestDecodeHeartbeatRejects(t *testing.T) {
	enc := func(mut func(*heartbeat)) []byte {
		hb := validHeartbeat(t)
		mut(hb)
		b, _ := encodeHeartbeat(hb)
		return b
	}
	tooMany := make([]string, maxHeartbeatAddrs+1)
	for i := range tooMany {
		tooMany[i] = "/ip4/1.2.3.4/tcp/1"
	}
	cases := map[string][]byte{
		"empty":          nil,
		"oversized":      append([]byte{heartbeatVersion}, bytes.Repeat([]byte(" "), maxHeartbeatBytes)...),
		"not json":       {heartbeatVersion, '{'},
		"bad id":         enc(func(h *heartbeat) { h.ID = "nope" }),
		"bad mesh":       enc(func(h *heartbeat) { h.Mesh = "UPPER" }),
		"bad addr":       enc(func(h *heartbeat) { h.Addrs = []string{"/ip4/300.0.0.1/tcp/1"} }),
		"too many addrs": enc(func(h *heartbeat) { h.Addrs = tooMany }),
		"negative rate":  enc(func(h *heartbeat) { h.Profile.GemmGFLOPS = -1 }),
		"long gpu name":  enc(func(h *heartbeat) { h.Profile.GPUs[0].Name = strings.Repeat("x", 300) }),
	}
	for name, b := range cases {
		if _, err := decodeHeartbeat(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := decodeHeartbeat([]byte{9, '{', '}'}); !errors.Is(err, errHeartbeatVersion) {
		t.Errorf("unknown version: %v", err)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	b, err := encodeHeartbeat(validHeartbeat(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	leaving := validHeartbeat(f)
	leaving.Leaving, leaving.Profile = true, nil
	b, _ = encodeHeartbeat(leaving)
	f.Add(b)
	f.Add([]byte{heartbeatVersion, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		hb, err := decodeHeartbeat(data)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same checks.
		again, err := encodeHeartbeat(hb)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := decodeHeartbeat(again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// TestMalformedHeartbeatDisconnects checks the validator: a malformed heartbeat (or one
// whose claimed id is not its signer's) delivered by an admitted peer is rejected, counted,
// logged and the peer disconnected.
func TestMalformedHeartbeatDisconnects(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	b := startMesh(t, testConfig(t, testSecret, a))
	testutil.WaitFor(t, 10*time.Second, "b admitted at a", func() bool { return a.IsAdmitted(b.ID()) })
	good, _ := encodeHeartbeat(validHeartbeat(t)) // claims a random id, signed by b
	for name, data := range map[string][]byte{"garbage": []byte("\x01{not json"), "claims another id": good} {
		testutil.WaitFor(t, 10*time.Second, "b admitted at a", func() bool { return a.IsAdmitted(b.ID()) })
		before := a.Stats().Malformed
		msg := &pubsub.Message{Message: &pb.Message{Data: data, From: []byte(b.ID())}, ReceivedFrom: b.ID()}
		if res := a.validateHeartbeat(context.Background(), b.ID(), msg); res != pubsub.ValidationReject {
			t.Errorf("%s: validation result %v, want reject", name, res)
		}
		if a.Stats().Malformed != before+1 {
			t.Errorf("%s: not counted", name)
		}
		testutil.WaitFor(t, 5*time.Second, name+": b disconnected", func() bool {
			return a.host.Network().Connectedness(b.ID()) != network.Connected || !a.IsAdmitted(b.ID())
		})
	}
}

// TestSybilRelayedHeartbeatsAreDropped performs the Sybil relay: an admitted member signs
// heartbeats with a key it minted (nobody proved the join secret for it) and publishes
// them. They carry valid signatures and arrive from an admitted peer, yet never enter the
// peer table, while the heartbeats of a member admitted directly still do.
func TestSybilRelayedHeartbeatsAreDropped(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	b := startMesh(t, testConfig(t, testSecret, a))
	sybil, publish := startHeartbeatForger(t, a)
	forged := func() bool {
		hb := validHeartbeat(t)
		hb.ID, hb.Addrs = sybil.String(), nil
		data, err := encodeHeartbeat(hb)
		if err != nil {
			t.Fatal(err)
		}
		publish(data)
		if inTable(a, sybil) || inTable(b, sybil) {
			t.Fatal("a heartbeat signed by a minted key entered a peer table")
		}
		return a.Stats().UnadmittedSigners >= 3
	}
	testutil.WaitFor(t, 20*time.Second, "three forged heartbeats dropped at a", forged)
	testutil.WaitFor(t, 10*time.Second, "b, admitted directly, alive at a", func() bool {
		return peerState(a, b.ID()) == StateAlive && peerState(b, a.ID()) == StateAlive
	})
	if inTable(a, sybil) || inTable(b, sybil) {
		t.Fatal("a heartbeat signed by a minted key entered a peer table")
	}
}

// TestDisconnectClosesThePeer: a peer the data plane caught breaking its protocol
// (Disconnect) is counted as a malformed message and disconnected, as a malformed
// heartbeat's sender is.
func TestDisconnectClosesThePeer(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	b := startMesh(t, testConfig(t, testSecret, a))
	testutil.WaitFor(t, 10*time.Second, "b admitted at a", func() bool { return a.IsAdmitted(b.ID()) })
	closed := make(chan struct{}, 16)
	n := &network.NotifyBundle{DisconnectedF: func(_ network.Network, c network.Conn) {
		if c.RemotePeer() == b.ID() {
			closed <- struct{}{}
		}
	}}
	a.host.Network().Notify(n)
	defer a.host.Network().StopNotify(n)
	before := a.Stats().Malformed
	a.Disconnect(b.ID(), "data-plane frame", errors.New("anchors of the wrong length"))
	if a.Stats().Malformed != before+1 {
		t.Error("not counted")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("b's connection was not closed")
	}
}

package mesh

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

// startHeartbeatForger starts an attacker that knows the join secret: a plain libp2p host
// admitted by m, whose gossipsub signs what it publishes on m's heartbeat topic with a key
// it minted (the Sybil). It returns the Sybil's ID and a function that publishes data.
func startHeartbeatForger(t *testing.T, m *Mesh) (peer.ID, func(data []byte)) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/udp/0/quic-v1"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.SetStreamHandler(ProtocolAuth, func(s network.Stream) {
		party := authParty{secret: []byte(testSecret), mesh: "test", self: h.ID(), remote: s.Conn().RemotePeer(), rand: rand.Reader}
		if err := party.respond(s); err != nil {
			_ = s.Reset()
			return
		}
		_ = s.Close()
	})
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	sybil, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Peerstore().AddPrivKey(sybil, key); err != nil {
		t.Fatal(err)
	}
	if err := h.Peerstore().AddPubKey(sybil, key.GetPublic()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithMessageAuthor(sybil), pubsub.WithMessageSignaturePolicy(pubsub.StrictSign))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(HeartbeatTopic("test"))
	if err != nil {
		t.Fatal(err)
	}
	connect, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := h.Connect(connect, peer.AddrInfo{ID: m.ID(), Addrs: m.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the forger admitted", func() bool { return m.IsAdmitted(h.ID()) })
	publish := func(data []byte) {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		if err := topic.Publish(pctx, data); err != nil {
			t.Logf("forger publish: %v", err)
		}
	}
	return sybil, publish
}

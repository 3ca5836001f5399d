package blob

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Issue 25: any member could fetch any blob a node held. A holder serves a blob only to the
// peers its AllowServe admits (the node: a live job's dataset to members, a checkpoint file
// to the job's plan), and a blob it asked a peer to hold to that peer while it asks.
func TestServeOnlyWhatThePolicyAllows(t *testing.T) {
	var allowed peer.ID
	policy := func(to peer.ID, id string) error {
		if to != allowed {
			return errors.New("no job of yours holds it")
		}
		return nil
	}
	accept := func(peer.ID, string) (int64, error) { return 0, nil }
	nodes := startBlobNodesWith(t, Config{AllowServe: policy}, Config{}, Config{}, Config{AcceptPull: accept})
	holder, member, stranger, taker := nodes[0], nodes[1], nodes[2], nodes[3]
	allowed = member.m.ID()
	data := testBlobData(5*testBlobChunk+3, 7)
	id, err := holder.b.Publish(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx := fetchCtx(t)
	if err := stranger.b.Fetch(ctx, id, []peer.ID{holder.m.ID()}); err == nil || stranger.b.Has(id) {
		t.Fatalf("a peer the policy refuses fetched the blob (err %v)", err)
	}
	if holder.b.Stats().RefusedServes == 0 {
		t.Error("the refusal was not counted")
	}
	if err := member.b.Fetch(ctx, id, []peer.ID{holder.m.ID()}); err != nil || !bytes.Equal(member.read(t, id), data) {
		t.Fatalf("a peer the policy admits: %v", err)
	}
	if err := holder.b.Replicate(ctx, taker.m.ID(), id); err != nil || !taker.b.Has(id) {
		t.Fatalf("a peer asked to hold the blob could not fetch it: %v", err)
	}
	if err := stranger.b.Fetch(ctx, id, []peer.ID{holder.m.ID()}); err == nil {
		t.Fatal("the offer to one peer served another")
	}
}

// Issue 25: a plan neighbour could have a node pull a blob of any size. The puller's policy
// bounds it (the node: the job's training state), checked in the manifest before any chunk.
func TestPullIsBoundedInSize(t *testing.T) {
	const limit = 2 * testBlobChunk
	accept := func(peer.ID, string) (int64, error) { return limit, nil }
	nodes := startBlobNodesWith(t, Config{}, Config{AcceptPull: accept})
	holder, taker := nodes[0], nodes[1]
	ctx := fetchCtx(t)
	big, err := holder.b.Publish(context.Background(), bytes.NewReader(testBlobData(limit+1, 8)))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.b.Replicate(ctx, taker.m.ID(), big); !errors.Is(err, ErrRefused) || taker.b.Has(big) {
		t.Fatalf("a pull past the taker's bound: %v, want ErrRefused", err)
	}
	if taker.b.Stats().ChunksFetched != 0 {
		t.Fatalf("%d chunks fetched before the size was refused", taker.b.Stats().ChunksFetched)
	}
	small, err := holder.b.Publish(context.Background(), bytes.NewReader(testBlobData(limit, 9)))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.b.Replicate(ctx, taker.m.ID(), small); err != nil || !taker.b.Has(small) {
		t.Fatalf("a pull within the bound: %v", err)
	}
}

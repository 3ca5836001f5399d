package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

const testBlobChunk = 4096

// blobNode is one mesh member with a blob store and service.
type blobNode struct {
	m host.Host
	b *Service
}

// startBlobNodes starts n admitted mesh members, each with its own store; tamper[i], when
// set, is node i's TamperChunk.
func startBlobNodes(t *testing.T, tamper ...func(string, int, []byte) []byte) []blobNode {
	t.Helper()
	cfgs := make([]Config, len(tamper))
	for i := range tamper {
		cfgs[i].TamperChunk = tamper[i]
	}
	return startBlobNodesWith(t, cfgs...)
}

// startBlobNodesWith starts one node per config on an in-memory network (mocknet), every
// pair connected; the test's defaults fill Parallel, MaxBadChunks, RequestTimeout and
// Logger. Admission is the mesh's concern, tested there; the blob protocol needs streams.
func startBlobNodesWith(t *testing.T, cfgs ...Config) []blobNode {
	t.Helper()
	hosts := startMockHosts(t, len(cfgs))
	var nodes []blobNode
	for i, cfg := range cfgs {
		cfg.Parallel, cfg.MaxBadChunks, cfg.RequestTimeout, cfg.Logger = 3, 2, 10*time.Second, testutil.Logger(t)
		nodes = append(nodes, blobNode{m: hosts[i], b: NewService(streamHost{hosts[i]}, openTestStore(t, testBlobChunk), cfg)})
	}
	return nodes
}

func (n blobNode) read(t *testing.T, id string) []byte {
	t.Helper()
	f, err := n.b.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fetchCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// flipChunk corrupts chunk `index` the first `times` times it is served.
func flipChunk(index int, times int64) func(string, int, []byte) []byte {
	var n atomic.Int64
	return func(_ string, i int, b []byte) []byte {
		if i == index && n.Add(1) <= times {
			b = bytes.Clone(b)
			b[len(b)/2] ^= 0x40
		}
		return b
	}
}

// flipAll corrupts every chunk served.
func flipAll(_ string, _ int, b []byte) []byte {
	b = bytes.Clone(b)
	b[0] ^= 1
	return b
}

func TestFetchRefetchesCorruptChunk(t *testing.T) {
	nodes := startBlobNodes(t, flipChunk(3, 2), nil, nil)
	holder, b, c := nodes[0], nodes[1], nodes[2]
	data := testBlobData(25*testBlobChunk+100, 7)
	id, err := holder.b.Publish(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx := fetchCtx(t)
	// Two concurrent Fetches on b share one transfer; c fetches too.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, n := range []blobNode{b, b, c} {
		wg.Go(func() { errs[i] = n.b.Fetch(ctx, id, []peer.ID{holder.m.ID()}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
	}
	for _, n := range []blobNode{b, c} {
		if !bytes.Equal(n.read(t, id), data) {
			t.Fatalf("fetched blob differs from the published one")
		}
	}
	bad := b.b.Stats().BadChunks + c.b.Stats().BadChunks
	if bad != 2 {
		t.Errorf("fetchers saw %d bad chunks, the holder corrupted 2", bad)
	}
	if got := b.b.Stats().ChunksFetched; got != 26 {
		t.Errorf("b fetched %d chunks, want 26 (one transfer for two concurrent Fetches)", got)
	}
	if st := b.b.Stats(); st.BlobsFetched != 1 || st.BytesFetched != int64(len(data)) {
		t.Errorf("b fetched %d blobs of %d bytes, want 1 of %d", st.BlobsFetched, st.BytesFetched, len(data))
	}
	if d := b.b.Stats().DroppedSources + c.b.Stats().DroppedSources; d != 0 {
		t.Errorf("%d sources dropped for 2 bad chunks with MaxBadChunks 2", d)
	}
}

func TestFetchDropsLyingSource(t *testing.T) {
	nodes := startBlobNodes(t, flipAll, nil, nil)
	liar, honest, c := nodes[0], nodes[1], nodes[2]
	data := testBlobData(10*testBlobChunk, 8)
	var id string
	for _, n := range []blobNode{liar, honest} {
		var err error
		if id, err = n.b.Publish(context.Background(), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := fetchCtx(t)
	// The liar alone: every chunk is bad, it is dropped and nothing enters the store.
	err := c.b.Fetch(ctx, id, []peer.ID{liar.m.ID()})
	if !errors.Is(err, ErrCorrupt) || c.b.Has(id) {
		t.Fatalf("fetch from a lying source: err %v, stored %v; want ErrCorrupt and nothing stored", err, c.b.Has(id))
	}
	if got := c.b.Stats().DroppedSources; got != 1 {
		t.Errorf("dropped %d sources, want 1", got)
	}
	// Liar first, then an honest holder: the liar is dropped, the honest one serves.
	if err := c.b.Fetch(ctx, id, []peer.ID{liar.m.ID(), honest.m.ID()}); err != nil {
		t.Fatalf("fetch with an honest second source: %v", err)
	}
	if !bytes.Equal(c.read(t, id), data) {
		t.Fatal("fetched blob differs from the published one")
	}
	if st := c.b.Stats(); st.DroppedSources != 2 || st.BadChunks < 2*3 {
		t.Errorf("stats %+v: want the liar dropped again after more than MaxBadChunks (2) bad chunks", st)
	}
}

func TestFetchNotFound(t *testing.T) {
	nodes := startBlobNodes(t, nil, nil, nil)
	holder, empty, c := nodes[0], nodes[1], nodes[2]
	data := testBlobData(3*testBlobChunk, 9)
	id, err := holder.b.Publish(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx := fetchCtx(t)
	if err := c.b.Fetch(ctx, id, []peer.ID{empty.m.ID()}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fetch from a peer without the blob: got %v, want ErrNotFound", err)
	}
	if err := c.b.Fetch(ctx, id, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fetch without sources: got %v, want ErrNotFound", err)
	}
	if err := c.b.Fetch(ctx, "not-an-id", []peer.ID{holder.m.ID()}); !errors.Is(err, ErrBadID) {
		t.Fatalf("fetch of a malformed ID: got %v, want ErrBadID", err)
	}
	if err := c.b.Fetch(ctx, id, []peer.ID{empty.m.ID(), holder.m.ID()}); err != nil {
		t.Fatalf("fetch with a holder second: %v", err)
	}
	if !bytes.Equal(c.read(t, id), data) {
		t.Fatal("fetched blob differs from the published one")
	}
	// A Fetch of a blob already held needs no source.
	if err := c.b.Fetch(ctx, id, nil); err != nil {
		t.Fatalf("fetch of a held blob: %v", err)
	}
}

// TestReplicate: a holder asks a peer to hold its blob; the peer fetches and verifies it
// before answering. A peer whose policy refuses, or one that takes no replicas, says so, and
// a blob the asker does not hold is an error before anything is sent.
func TestReplicate(t *testing.T) {
	var asked atomic.Int64
	accept := func(from peer.ID, id string) (int64, error) {
		asked.Add(1)
		if id == "" {
			return 0, errors.New("no id")
		}
		return 0, nil
	}
	refuse := func(peer.ID, string) (int64, error) { return 0, errors.New("not in any job with you") }
	nodes := startBlobNodesWith(t, Config{}, Config{AcceptPull: accept}, Config{AcceptPull: refuse}, Config{})
	holder, taker, refuser, none := nodes[0], nodes[1], nodes[2], nodes[3]
	data := testBlobData(9*testBlobChunk+17, 3)
	id, err := holder.b.Publish(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx := fetchCtx(t)
	if err := holder.b.Replicate(ctx, taker.m.ID(), id); err != nil {
		t.Fatalf("replicate to a willing peer: %v", err)
	}
	if !taker.b.Has(id) || !bytes.Equal(taker.read(t, id), data) || asked.Load() != 1 {
		t.Fatalf("the willing peer does not hold the blob after Replicate returned (asked %d)", asked.Load())
	}
	if err := holder.b.Replicate(ctx, refuser.m.ID(), id); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not in any job") {
		t.Fatalf("replicate to a refusing peer: got %v, want ErrRefused with its reason", err)
	}
	if err := holder.b.Replicate(ctx, none.m.ID(), id); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no replicas") {
		t.Fatalf("replicate to a peer without a policy: got %v, want ErrRefused", err)
	}
	if refuser.b.Has(id) || none.b.Has(id) {
		t.Fatal("a refusing peer fetched the blob")
	}
	other := IDOf(testBlobData(100, 4), testBlobChunk)
	if err := holder.b.Replicate(ctx, taker.m.ID(), other); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replicate a blob the asker lacks: got %v, want ErrNotFound", err)
	}
}

// TestFetchAtMost: a fetch bounded by a size a peer announced is refused from the manifest
// when the blob is larger (nothing is stored), and a bound that is not positive is refused
// rather than read as "any size"; within the bound the blob is fetched.
func TestFetchAtMost(t *testing.T) {
	nodes := startBlobNodes(t, nil, nil)
	holder, c := nodes[0], nodes[1]
	data := testBlobData(3*testBlobChunk, 11)
	id, err := holder.b.Publish(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx := fetchCtx(t)
	from := []peer.ID{holder.m.ID()}
	for _, bound := range []int64{int64(len(data)) - 1, 0, -1} {
		if err := c.b.FetchAtMost(ctx, id, from, bound); !errors.Is(err, ErrTooLarge) || c.b.Has(id) {
			t.Fatalf("bound %d for %d bytes: %v (held %v), want ErrTooLarge", bound, len(data), err, c.b.Has(id))
		}
	}
	if err := c.b.FetchAtMost(ctx, id, from, int64(len(data))); err != nil || !bytes.Equal(c.read(t, id), data) {
		t.Fatalf("within the bound: %v", err)
	}
}

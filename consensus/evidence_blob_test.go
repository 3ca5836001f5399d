package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestEvidenceBlobIsFetchedFromTheReporter: evidence larger than an RPC message is
// announced by hash and size; the leader takes it up, then fetches it from the reporter
// with the fetcher its node installs and judges the bytes in the background, committing
// the verdict. Without a fetcher the evidence is refused at once; when the fetch fails (a
// blob not matching its hash, refused by the reporter) nothing is judged and no verdict
// is committed.
func TestEvidenceBlobIsFetchedFromTheReporter(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, a, _ := threeVoters(t, tc)
	id := runningOn(t, ctx, a, leader, "evidence-blob")
	var mu sync.Mutex
	var judged []int
	leader.c.SetEvidenceJudge(func(_ context.Context, _ Job, _, _ string, ev []byte) (bool, string, error) {
		mu.Lock()
		judged = append(judged, len(ev))
		mu.Unlock()
		return true, "guilty", nil
	})
	big := MaxEvidenceBytes + 1
	good, bad := strings.Repeat("a", 64), strings.Repeat("b", 64)
	if err := a.c.ShipEvidenceBlob(ctx, id, leader.id.String(), good, int64(big)); !errors.Is(err, ErrForbidden) {
		t.Fatalf("an evidence blob to a leader without a fetcher: %v, want ErrForbidden", err)
	}
	var fetchedFrom []peer.ID
	leader.c.SetEvidenceFetcher(func(_ context.Context, j Job, reporter peer.ID, blob string, size int64) ([]byte, error) {
		mu.Lock()
		fetchedFrom = append(fetchedFrom, reporter)
		mu.Unlock()
		if blob != good {
			return nil, errors.New("blob does not match its hash")
		}
		return make([]byte, size), nil
	})
	clearEvidenceRate(leader)
	if err := a.c.ShipEvidenceBlob(ctx, id, leader.id.String(), bad, int64(big)); err != nil {
		t.Fatalf("an evidence blob not matching its hash: %v, want it taken up", err)
	}
	waitEvidenceIdle(t, leader)
	if j, _, _ := leader.c.FSM().Job(id); len(j.Verdicts) != 0 {
		t.Fatalf("a verdict on a blob not matching its hash: %+v", j.Verdicts)
	}
	mu.Lock()
	if len(judged) != 0 {
		t.Fatalf("refused evidence was judged: %v", judged)
	}
	mu.Unlock()
	clearEvidenceRate(leader)
	if err := a.c.ShipEvidenceBlob(ctx, id, leader.id.String(), good, int64(big)); err != nil {
		t.Fatal(err)
	}
	waitEvidenceIdle(t, leader)
	j, _, _ := leader.c.FSM().Job(id)
	if len(j.Verdicts) != 1 || !j.Verdicts[0].Convicted || j.Verdicts[0].Accuser != a.id.String() {
		t.Fatalf("verdicts %+v: want one convicting, accused by %s", j.Verdicts, a.id)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(judged) != 1 || judged[0] != big {
		t.Fatalf("judged %v bytes, want [%d]: the evidence over the RPC's bound", judged, big)
	}
	for _, p := range fetchedFrom {
		if p != a.id {
			t.Fatalf("fetched from %s, want only the reporter %s", p, a.id)
		}
	}
}

// waitEvidenceIdle waits until n's leader has no evidence in flight: its background
// judgements have ended.
func waitEvidenceIdle(t *testing.T, n *testNode) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "the leader's evidence judgements to end", func() bool {
		n.c.evidence.mu.Lock()
		defer n.c.evidence.mu.Unlock()
		return len(n.c.evidence.busy) == 0
	})
}

// clearEvidenceRate forgets when reporters last had evidence judged: past
// EvidenceInterval, without waiting for it.
func clearEvidenceRate(n *testNode) {
	n.c.evidence.mu.Lock()
	clear(n.c.evidence.last)
	n.c.evidence.mu.Unlock()
}

// TestEvidenceRequestChecks: a message carries inline bytes or a blob, never both; a
// blob's ID and size are bounded before anything is fetched.
func TestEvidenceRequestChecks(t *testing.T) {
	blob := strings.Repeat("a", 64)
	for name, c := range map[string]struct {
		req  EvidenceRequest
		want error
	}{
		"inline":            {EvidenceRequest{JobID: "j", Member: "m", Evidence: []byte("x")}, nil},
		"blob":              {EvidenceRequest{JobID: "j", Member: "m", Blob: blob, Size: 2 << 20}, nil},
		"both":              {EvidenceRequest{JobID: "j", Member: "m", Evidence: []byte("x"), Blob: blob, Size: 1}, ErrBadRequest},
		"size without blob": {EvidenceRequest{JobID: "j", Member: "m", Size: 1}, ErrBadRequest},
		"no size":           {EvidenceRequest{JobID: "j", Member: "m", Blob: blob}, ErrBadRequest},
		"negative size":     {EvidenceRequest{JobID: "j", Member: "m", Blob: blob, Size: -1}, ErrBadRequest},
		"huge":              {EvidenceRequest{JobID: "j", Member: "m", Blob: blob, Size: MaxEvidenceBlobBytes + 1}, ErrTooLarge},
		"long ID":           {EvidenceRequest{JobID: "j", Member: "m", Blob: strings.Repeat("a", maxEvidenceBlobID+1), Size: 1}, ErrBadRequest},
	} {
		body, _ := json.Marshal(c.req)
		if _, err := decodeEvidenceRequest(body); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := decodeEvidenceRequest([]byte(`{"job_id":"j","member":"m","extra":1}`)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("an unknown field: %v, want ErrBadRequest", err)
	}
}

// FuzzEvidenceRequest: the evidence message's decoder never panics, and what it accepts
// is within its bounds: inline or a blob, not both, sizes bounded.
func FuzzEvidenceRequest(f *testing.F) {
	for _, r := range []EvidenceRequest{
		{JobID: "j", Member: "m", Evidence: []byte("guilty")},
		{JobID: "j", Member: "m", Blob: strings.Repeat("a", 64), Size: 3 << 20},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"blob":"x","size":-9223372036854775808}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeEvidenceRequest(body)
		if err != nil {
			return
		}
		if len(r.Evidence) > MaxEvidenceBytes || len(r.Blob) > maxEvidenceBlobID || r.Size < 0 || r.Size > MaxEvidenceBlobBytes {
			t.Fatalf("accepted out of bounds: %d inline bytes, blob ID of %d, size %d", len(r.Evidence), len(r.Blob), r.Size)
		}
		if r.Blob != "" && (len(r.Evidence) > 0 || r.Size == 0) || r.Blob == "" && r.Size != 0 {
			t.Fatalf("accepted inconsistent: %d inline bytes, blob %q, size %d", len(r.Evidence), r.Blob, r.Size)
		}
	})
}

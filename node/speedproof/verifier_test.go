package speedproof

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/meshnode/meshnode/kernels"
)

// mockPair starts a verifier and a prover host on an in-memory network, connected, closed
// when the test ends.
func mockPair(t *testing.T) (verifier, prover host.Host) {
	hs := mockHosts(t, 2)
	return hs[0], hs[1]
}

// mockHosts starts n hosts on an in-memory network, all connected, closed when the test
// ends.
func mockHosts(t *testing.T, n int) []host.Host {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	hs := make([]host.Host, n)
	for i := range hs {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	return hs
}

func challenge(t *testing.T, v, p host.Host, c Challenge, pick func(int) int) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := v.NewStream(ctx, p.ID(), ProtocolID)
	if err != nil {
		// A prover that refuses resets the stream at once, which may land before the
		// protocol's negotiation finished ("failed to negotiate protocol: stream reset"):
		// as much a refusal as a reset after it.
		return Result{}, err
	}
	defer s.Close()
	return Verify(ctx, s, c, time.Minute, pick)
}

func only(id peer.ID) func(peer.ID) bool { return func(p peer.ID) bool { return p == id } }

// TestHonestProverIsVerified: an honest prover's answer passes, and the speed it proves
// is what its kernels deliver (logged beside a GEMM measurement of the same shape; not
// asserted: the machine is shared).
func TestHonestProverIsVerified(t *testing.T) {
	v, p := mockPair(t)
	claim := kernels.MeasureGemm(DefaultRows, DefaultCols, DefaultCols, 0, 200*time.Millisecond)
	p.SetStreamHandler(ProtocolID, NewProver(ProverConfig{Allow: only(v.ID()), MinInterval: -1, Claim: func() float64 { return claim }}).HandleStream)
	res, err := challenge(t, v, p, Size(claim, 300*time.Millisecond), nil)
	if err != nil {
		t.Fatalf("honest answer refused: %v", err)
	}
	if res.GFLOPS <= 0 || res.Path != kernels.GemmName() {
		t.Fatalf("result %+v", res)
	}
	t.Logf("claim %.1f GFLOP/s (wall clock, just measured), proved %.1f GFLOP/s (%d links in %v, path %s): ratio %.2f",
		claim, res.GFLOPS, res.Challenge.Links, res.RoundTrip, res.Path, res.GFLOPS/claim)
}

// liar answers with the chain's hashes computed on only the first rows rows of it (the rest
// made up), and claims the path path.
func liar(rows int, path string) network.StreamHandler {
	return func(s network.Stream) {
		defer s.Close()
		c, err := ReadChallenge(s)
		if err != nil {
			_ = s.Reset()
			return
		}
		idx := make([]int, rows)
		for i := range idx {
			idx[i] = i
		}
		hashes := make([]byte, c.Rows*RowHashSize)
		if rows > 0 {
			h, _ := SolveRows(c, idx, "go")
			copy(hashes, h)
		}
		b, _ := Answer{Path: path, Hashes: hashes}.MarshalBinary()
		_, _ = s.Write(b)
	}
}

// TestWrongAnswerIsDetected: an answer made up, or computed for half of the rows only, is
// ErrWrongAnswer (the sampler is seeded: with a random one half the rows pass 1 time in
// 256); one on a path this machine does not have is ErrPathUnknown, not a lie.
func TestWrongAnswerIsDetected(t *testing.T) {
	c := Challenge{Rows: 64, Cols: 64, Links: 3}
	c.Seed[0] = 1
	for name, tc := range map[string]struct {
		rows int
		path string
		want error
	}{
		"made up":        {0, "go", ErrWrongAnswer},
		"half the rows":  {32, "go", ErrWrongAnswer},
		"unknown path":   {64, "tpu9", ErrPathUnknown},
		"every row, go":  {64, "go", nil},
		"the wrong path": {64, "avx2", ErrWrongAnswer},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.path == "avx2" {
				if _, ok := pathImpl("avx2"); !ok {
					t.Skip("no AVX2 here")
				}
			}
			v, p := mockPair(t)
			p.SetStreamHandler(ProtocolID, liar(tc.rows, tc.path))
			_, err := challenge(t, v, p, c, rand.New(rand.NewPCG(1, 2)).IntN)
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestProverAnswersOnlyWhomItAllowsAndNotTooOften: a peer Allow refuses gets its stream
// reset before anything is computed, as does a challenge longer than MaxClaimTime at the
// prover's claim; a second challenge within MinInterval is refused.
func TestProverAnswersOnlyWhomItAllowsAndNotTooOften(t *testing.T) {
	v, p := mockPair(t)
	c := Challenge{Rows: MinRows, Cols: MinCols, Links: 1}
	refusing := NewProver(ProverConfig{Allow: only(p.ID())})
	p.SetStreamHandler(ProtocolID, refusing.HandleStream)
	if _, err := challenge(t, v, p, c, nil); err == nil || refusing.Refused() != 1 {
		t.Fatalf("a peer not allowed was answered (%v, %d refused)", err, refusing.Refused())
	}
	modest := NewProver(ProverConfig{Allow: only(v.ID()), MinInterval: -1, Claim: func() float64 { return 1 }})
	p.SetStreamHandler(ProtocolID, modest.HandleStream)
	if _, err := challenge(t, v, p, Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 4}, nil); err == nil || modest.Refused() != 1 {
		t.Fatalf("a node claiming 1 GFLOP/s answered 4.3 GFLOP (%v, %d refused)", err, modest.Refused())
	}
	limited := NewProver(ProverConfig{Allow: only(v.ID()), MinInterval: time.Hour})
	p.SetStreamHandler(ProtocolID, limited.HandleStream)
	if _, err := challenge(t, v, p, c, nil); err != nil {
		t.Fatalf("first challenge: %v", err)
	}
	if _, err := challenge(t, v, p, c, nil); err == nil || limited.Refused() != 1 {
		t.Fatalf("a second challenge within the interval was answered (%v, %d refused)", err, limited.Refused())
	}
	// A new leader challenges within the old one's interval: answered (the old leader's
	// proof may have been lost with its leadership), and held to its own interval.
	hs := mockHosts(t, 3)
	a, b, q := hs[0], hs[1], hs[2]
	leader := a.ID()
	perLeader := NewProver(ProverConfig{Allow: func(id peer.ID) bool { return id == leader }, MinInterval: time.Hour})
	q.SetStreamHandler(ProtocolID, perLeader.HandleStream)
	if _, err := challenge(t, a, q, c, nil); err != nil {
		t.Fatalf("the first leader's challenge: %v", err)
	}
	leader = b.ID()
	if _, err := challenge(t, b, q, c, nil); err != nil {
		t.Fatalf("the next leader's challenge within the first's interval was refused: %v", err)
	}
	if _, err := challenge(t, b, q, c, nil); err == nil || perLeader.Refused() != 1 {
		t.Fatalf("the next leader's second challenge within its interval was answered (%v, %d refused)", err, perLeader.Refused())
	}
}

// TestVerifyEndsWithItsContextOrTimeout: a verifier waiting on a member that holds the
// challenge open stops when its context is cancelled or its timeout passes (the stream is
// reset: mocknet's streams, like some transports, ignore deadlines).
func TestVerifyEndsWithItsContextOrTimeout(t *testing.T) {
	for name, timeout := range map[string]time.Duration{"cancelled": time.Hour, "timed out": time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			v, p := mockPair(t)
			held := make(chan struct{})
			defer close(held)
			p.SetStreamHandler(ProtocolID, func(s network.Stream) {
				_, _ = ReadChallenge(s) // then holds it open, unanswered
				<-held
				_ = s.Reset()
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := v.NewStream(ctx, p.ID(), ProtocolID)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			done := make(chan error, 1)
			go func() {
				_, err := Verify(ctx, s, Challenge{Rows: MinRows, Cols: MinCols, Links: 1}, timeout, nil)
				done <- err
			}()
			if timeout == time.Hour {
				cancel()
			}
			if err := <-done; err == nil {
				t.Fatal("an unanswered challenge was verified")
			}
		})
	}
}

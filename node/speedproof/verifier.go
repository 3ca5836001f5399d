package speedproof

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Stream is what a challenge travels on (a libp2p network.Stream is one).
type Stream interface {
	io.ReadWriter
	SetDeadline(time.Time) error
	CloseWrite() error
	Reset() error
}

// Result is what one challenge proved.
type Result struct {
	Challenge Challenge
	Path      string        // the kernel path the prover computed on
	RoundTrip time.Duration // from the challenge sent to the answer read
	GFLOPS    float64       // Rate(Challenge, RoundTrip)
}

// MinTimeout is the least time a prover is given to answer, whatever its claim: a
// challenge sized for a fraction of a second at the claim must not fail on a busy
// network or machine. MaxTimeout is the most, so that a member claiming next to nothing
// cannot hold its verifier for long (one link of the default shape at 18 MFLOP/s).
const MinTimeout, MaxTimeout = 5 * time.Second, time.Minute

// Timeout is how long a verifier waits for the answer to c from a node claiming
// claimGFLOPS: four times the time the claim needs, within [MinTimeout, MaxTimeout]. A
// node that needs longer proved less than c.FLOPs()/Timeout, and is priced as having
// proved nothing.
func Timeout(c Challenge, claimGFLOPS float64) time.Duration {
	if !(claimGFLOPS > 0) {
		return MinTimeout
	}
	need := 4 * c.FLOPs() / (claimGFLOPS * 1e9)
	if need >= MaxTimeout.Seconds() {
		return MaxTimeout
	}
	return max(MinTimeout, time.Duration(need*float64(time.Second)))
}

// Verify sends c on s, waits at most timeout (or until ctx ends: s is then reset) for the
// answer, and checks it (Check, with pick). The result's rate counts the whole round trip. A wrong answer is
// ErrWrongAnswer; an answer on a kernel path this machine cannot reproduce,
// ErrPathUnknown; anything else (refused, timed out, malformed) proves nothing.
func Verify(ctx context.Context, s Stream, c Challenge, timeout time.Duration, pick func(int) int) (Result, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.SetDeadline(deadline)
	// The deadline or a cancelled ctx resets the stream, which ends the wait on any
	// transport (not every one honours deadlines).
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	b, err := c.MarshalBinary()
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	if _, err := s.Write(b); err != nil {
		return Result{}, fmt.Errorf("send challenge: %w", err)
	}
	_ = s.CloseWrite()
	a, err := ReadAnswer(s, c)
	rtt := time.Since(start)
	if err != nil {
		return Result{}, err
	}
	res := Result{Challenge: c, Path: a.Path, RoundTrip: rtt, GFLOPS: Rate(c, rtt)}
	return res, Check(c, a, pick)
}

package dataplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Probe operations, in a frame.KindProbe frame's Index. Probe frames measure a link over
// the data plane itself, so that the path tensors take (a WAN relay in front of the
// data-plane port included) is what gets measured. They are answered or consumed by the
// data plane and never reach the mailbox. The frame's Index says what it is, Job carries
// the prober's token:
//
//	ping  (Index 1, no payload)                → pong (Index 2, same token)
//	data  (Index 3, n ≤ frame.MaxProbePayload) → ack  (Index 4, same token, Step = n)
//
// Replies go out on the replying side's probe stream, sent from their own goroutine
// (at most maxProbeReplies at a time; more are dropped) so that a reader never waits on
// a write.
const (
	probeOpPing uint16 = 1
	probeOpPong uint16 = 2
	probeOpData uint16 = 3
	probeOpAck  uint16 = 4
)

const (
	maxProbeReplies   = 8
	probeReplyTimeout = 30 * time.Second
)

// ErrProbeReply is returned by Probe when the peer's answer does not match the probe.
var ErrProbeReply = errors.New("data plane: bad probe reply")

// ProbeConfig tunes one Probe. Every field documents its zero value.
type ProbeConfig struct {
	// Pings is the number of round trips whose median is the RTT. Zero means 5.
	Pings int
	// MinBytes is the first bandwidth transfer's size. Zero means 256 KiB.
	MinBytes int
	// MaxBytes caps a transfer; sizes double (or jump to what Target asks) until one
	// takes Target or reaches MaxBytes. Zero means 32 MiB; at most frame.MaxProbePayload.
	MaxBytes int
	// Target is the transfer duration the probe grows towards. Zero means 200 ms.
	Target time.Duration
	// Timeout bounds the whole probe on top of the caller's context. Zero means 30 s.
	Timeout time.Duration
}

func (c ProbeConfig) pings() int             { return orDefault(c.Pings, 5) }
func (c ProbeConfig) minBytes() int          { return orDefault(c.MinBytes, 256<<10) }
func (c ProbeConfig) maxBytes() int          { return min(orDefault(c.MaxBytes, 32<<20), frame.MaxProbePayload) }
func (c ProbeConfig) target() time.Duration  { return orDefault(c.Target, 200*time.Millisecond) }
func (c ProbeConfig) timeout() time.Duration { return orDefault(c.Timeout, 30*time.Second) }

// probeState tracks the probes this data plane is waiting on and the replies it sends.
type probeState struct {
	mu      sync.Mutex
	waiting map[uint64]chan *frame.Frame // token → the waiting Probe
	replies chan struct{}                // maxProbeReplies tokens
	// lose is how many of the next pings this side answers nothing, as if they were lost
	// on the way (tests of the ping's retry set it; zero otherwise).
	lose int
}

// lost says whether a ping that arrived is to be taken as lost (lose).
func (s *probeState) lost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lose > 0 {
		s.lose--
		return true
	}
	return false
}

func (s *probeState) wait(token uint64) chan *frame.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[uint64]chan *frame.Frame{}
	}
	ch := make(chan *frame.Frame, 1)
	s.waiting[token] = ch
	return ch
}

func (s *probeState) done(token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, token)
}

// deliver hands a reply to its waiting Probe; a late or unknown reply is dropped.
func (s *probeState) deliver(f *frame.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.waiting[f.Job]; ch != nil {
		delete(s.waiting, f.Job)
		ch <- f
	}
}

func (s *probeState) replySlot() bool {
	s.mu.Lock()
	if s.replies == nil {
		s.replies = make(chan struct{}, maxProbeReplies)
	}
	sem := s.replies
	s.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *probeState) releaseReply() { <-s.replies }

// handleProbeFrame answers a probe frame that arrived from c's peer, or hands a reply to
// the Probe waiting for it. It is called by the stream reader and never blocks on I/O.
func (d *Plane) handleProbeFrame(peer string, f *frame.Frame) {
	switch {
	case f.Index == probeOpPong && len(f.Payload) == 0, f.Index == probeOpAck && len(f.Payload) == 0:
		d.probes.deliver(f)
	case f.Index == probeOpPing && len(f.Payload) == 0:
		if d.probes.lost() {
			return
		}
		d.replyProbe(peer, &frame.Frame{Kind: frame.KindProbe, DType: frame.DTypeU8, Index: probeOpPong, Job: f.Job})
	case f.Index == probeOpData:
		d.replyProbe(peer, &frame.Frame{Kind: frame.KindProbe, DType: frame.DTypeU8, Index: probeOpAck, Job: f.Job, Step: uint32(len(f.Payload))})
	default:
		d.stats.badFrame(peer)
		d.log.Warn("bad probe frame; dropped", "peer", peer, "op", f.Index, "payload", len(f.Payload))
	}
}

func (d *Plane) replyProbe(to string, f *frame.Frame) {
	if !d.probes.replySlot() {
		d.log.Debug("probe reply dropped: too many in flight", "peer", to)
		return
	}
	d.wg.Add(1) // the calling reader holds the group open, so this cannot race Close's Wait
	go func() {
		defer d.wg.Done()
		defer d.probes.releaseReply()
		ctx, cancel := context.WithTimeout(d.ctx, probeReplyTimeout)
		defer cancel()
		if err := d.Send(ctx, to, f); err != nil {
			d.log.Debug("probe reply", "peer", to, "err", err)
		}
	}()
}

// Probe measures the link to peerID over the data plane: rtt is the median of
// cfg.Pings ping/pong round trips, and bandwidth (in bits per second) the rate of the
// last of a series of timed transfers, each acknowledged by the peer once it has received
// every byte, growing from MinBytes until one takes Target or reaches MaxBytes. The peer
// must be reachable (SetPeerAddr, or a connection it opened).
func (d *Plane) Probe(ctx context.Context, peerID string, cfg ProbeConfig) (rtt time.Duration, bandwidth float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	rtts := make([]time.Duration, 0, cfg.pings())
	for range cfg.pings() {
		took, err := d.ping(ctx, peerID)
		if err != nil {
			return 0, 0, fmt.Errorf("data plane: probe %s: ping: %w", peerID, err)
		}
		rtts = append(rtts, took)
	}
	slices.Sort(rtts)
	rtt = rtts[len(rtts)/2]
	var buf []byte
	for size := cfg.minBytes(); ; {
		if len(buf) < size {
			buf = make([]byte, size)
		}
		took, err := d.probeOnce(ctx, peerID, &frame.Frame{Index: probeOpData, Payload: buf[:size]}, probeOpAck, size)
		if err != nil {
			return 0, 0, fmt.Errorf("data plane: probe %s: transfer of %d bytes: %w", peerID, size, err)
		}
		if took > 2*rtt {
			took -= rtt // the ack's trip back, small against the transfer
		}
		bandwidth = float64(size) * 8 / took.Seconds()
		if took >= cfg.target() || size >= cfg.maxBytes() {
			return rtt, bandwidth, nil
		}
		next := max(2*size, int(bandwidth/8*cfg.target().Seconds())) // jump to the target's size
		size = min(next, cfg.maxBytes())
	}
}

// pingRetry is how long a ping waits for its pong before another ping (a new token) is
// sent; each further try waits twice as long, within the probe's timeout.
const pingRetry = 2 * time.Second

// ping is one ping/pong round trip, the ping sent again when no pong came in pingRetry
// (then 2×, 4×, …): a ping is one small frame, and one frame can be lost with the
// connection it went into (a peer's connection closed by a CONNECTION_CLOSE that did not
// arrive, a peer restarted). Sent once, such a loss cost the whole probe its timeout: two
// such probes in a row left a testnet unready after 86 s (CI: "node0 sees no data-plane
// link of node2 to node0", each probe "ping: context deadline exceeded"). A pong that
// comes after its ping was given up is dropped (its token is no longer awaited).
func (d *Plane) ping(ctx context.Context, peerID string) (time.Duration, error) {
	for wait := pingRetry; ; wait *= 2 {
		try, cancel := context.WithTimeout(ctx, wait)
		took, err := d.probeOnce(try, peerID, &frame.Frame{Index: probeOpPing}, probeOpPong, 0)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return took, err
		}
		d.log.Debug("no pong yet; pinging again", "peer", peerID, "waited", wait)
	}
}

// probeOnce sends f as a probe frame and waits for the reply op; an ack must count want
// bytes.
func (d *Plane) probeOnce(ctx context.Context, peerID string, f *frame.Frame, reply uint16, want int) (time.Duration, error) {
	f.Kind, f.DType, f.Job = frame.KindProbe, frame.DTypeU8, rand.Uint64()
	ch := d.probes.wait(f.Job)
	defer d.probes.done(f.Job)
	start := time.Now()
	if err := d.Send(ctx, peerID, f); err != nil {
		return 0, err
	}
	select {
	case r := <-ch:
		if r.Index != reply || (reply == probeOpAck && int(r.Step) != want) {
			return 0, fmt.Errorf("%w: op %d counting %d bytes, want op %d counting %d", ErrProbeReply, r.Index, r.Step, reply, want)
		}
		return time.Since(start), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-d.ctx.Done():
		return 0, ErrClosed
	}
}

package mesh

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// KindProbe frames measure a link over the data plane itself, so that the path tensors
// take (a WAN relay in front of the data-plane port included) is what gets measured.
// They are answered or consumed by the data plane and never reach the mailbox. The
// frame's Index says what it is, Job carries the prober's token:
//
//	ping  (Index 1, no payload)          → pong (Index 2, same token)
//	data  (Index 3, n ≤ MaxDataProbeBytes) → ack  (Index 4, same token, Step = n)
//
// Replies go out on the replying side's probe stream, sent from their own goroutine
// (at most maxProbeReplies at a time; more are dropped) so that a reader never waits on
// a write.
const KindProbe FrameKind = 5

// Probe operations, in a KindProbe frame's Index.
const (
	probeOpPing uint16 = 1
	probeOpPong uint16 = 2
	probeOpData uint16 = 3
	probeOpAck  uint16 = 4
)

const (
	// MaxDataProbeBytes bounds the payload of one probe frame, checked in the header
	// before anything is allocated.
	MaxDataProbeBytes = 64 << 20
	maxProbeReplies   = 8
	probeReplyTimeout = 30 * time.Second
)

// ErrProbeReply is returned by Probe when the peer's answer does not match the probe.
var ErrProbeReply = errors.New("data plane: bad probe reply")

// DataProbeConfig tunes one Probe. Every field documents its zero value.
type DataProbeConfig struct {
	// Pings is the number of round trips whose median is the RTT. Zero means 5.
	Pings int
	// MinBytes is the first bandwidth transfer's size. Zero means 256 KiB.
	MinBytes int
	// MaxBytes caps a transfer; sizes double (or jump to what Target asks) until one
	// takes Target or reaches MaxBytes. Zero means 32 MiB; at most MaxDataProbeBytes.
	MaxBytes int
	// Target is the transfer duration the probe grows towards. Zero means 200 ms.
	Target time.Duration
	// Timeout bounds the whole probe on top of the caller's context. Zero means 30 s.
	Timeout time.Duration
}

func (c DataProbeConfig) pings() int             { return dpOr(c.Pings, 5) }
func (c DataProbeConfig) minBytes() int          { return dpOr(c.MinBytes, 256<<10) }
func (c DataProbeConfig) maxBytes() int          { return min(dpOr(c.MaxBytes, 32<<20), MaxDataProbeBytes) }
func (c DataProbeConfig) target() time.Duration  { return dpOr(c.Target, 200*time.Millisecond) }
func (c DataProbeConfig) timeout() time.Duration { return dpOr(c.Timeout, 30*time.Second) }

// probeState tracks the probes this data plane is waiting on and the replies it sends.
type probeState struct {
	mu      sync.Mutex
	waiting map[uint64]chan *Frame // token → the waiting Probe
	replies chan struct{}          // maxProbeReplies tokens
}

func (s *probeState) wait(token uint64) chan *Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[uint64]chan *Frame{}
	}
	ch := make(chan *Frame, 1)
	s.waiting[token] = ch
	return ch
}

func (s *probeState) done(token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, token)
}

// deliver hands a reply to its waiting Probe; a late or unknown reply is dropped.
func (s *probeState) deliver(f *Frame) {
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

// probePayloadOK bounds probe frames in the header: pings, pongs and acks are empty,
// data frames hold at most MaxDataProbeBytes.
func probePayloadOK(k FrameKind, n uint32) bool {
	return k != KindProbe || n <= MaxDataProbeBytes
}

// handleProbeFrame answers a probe frame that arrived from c's peer, or hands a reply to
// the Probe waiting for it. It is called by the stream reader and never blocks on I/O.
func (d *DataPlane) handleProbeFrame(c *dpConn, f *Frame) {
	switch {
	case f.Index == probeOpPong && len(f.Payload) == 0, f.Index == probeOpAck && len(f.Payload) == 0:
		d.probes.deliver(f)
	case f.Index == probeOpPing && len(f.Payload) == 0:
		d.replyProbe(c.peer, &Frame{Kind: KindProbe, DType: DTypeU8, Index: probeOpPong, Job: f.Job})
	case f.Index == probeOpData:
		d.replyProbe(c.peer, &Frame{Kind: KindProbe, DType: DTypeU8, Index: probeOpAck, Job: f.Job, Step: uint32(len(f.Payload))})
	default:
		d.stats.badFrame(c.peer)
		d.log.Warn("bad probe frame; dropped", "peer", c.peer, "op", f.Index, "payload", len(f.Payload))
	}
}

func (d *DataPlane) replyProbe(to string, f *Frame) {
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
func (d *DataPlane) Probe(ctx context.Context, peerID string, cfg DataProbeConfig) (rtt time.Duration, bandwidth float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	rtts := make([]time.Duration, 0, cfg.pings())
	for range cfg.pings() {
		took, err := d.probeOnce(ctx, peerID, &Frame{Index: probeOpPing}, probeOpPong, 0)
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
		took, err := d.probeOnce(ctx, peerID, &Frame{Index: probeOpData, Payload: buf[:size]}, probeOpAck, size)
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

// probeOnce sends f as a probe frame and waits for the reply op; an ack must count want
// bytes.
func (d *DataPlane) probeOnce(ctx context.Context, peerID string, f *Frame, reply uint16, want int) (time.Duration, error) {
	f.Kind, f.DType, f.Job = KindProbe, DTypeU8, rand.Uint64()
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
		return 0, ErrDataPlaneClosed
	}
}

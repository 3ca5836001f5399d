package dataplane

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// A peer that restarts in place before anyone noticed (kill -9, then the same identity on
// the same port) leaves this node sending into a connection to its old process. The first
// frame written into it reaches the new process only as packets of a connection it does
// not know, which it answers with a stateless reset (reset.go): the connection closes, and
// the next Send dials the new process. That first frame, though, was handed to QUIC and
// Send returned nil: without help it is lost, and a protocol that sends a frame once (a
// quorum's held set, a rebuild's step) waits for it until it times out. Nothing written on
// a connection that ended in a stateless reset reached the process that holds the peer's
// identity now, so the data plane keeps a copy of the small frames written lately on each
// connection and, when a reset ends it, sends those of the last resendWindow again to the
// new process. Frames of one kind may then arrive out of order with the ones sent on the
// new connection meanwhile; keys, not order, match them to their receivers (Recv).
//
// A Confirm's connection swallows frames the same way: the peer that dialled it to check
// an address closes it (ConnConfirmed) once its handshake is done, without reading, while
// this side, which adopted it as a connection the peer dialled, may already have written
// into it; those frames are sent again too.
//
// Large frames (activations and contributions of real models) are not kept: copying them
// on every send would cost more than the rare restart saves, and the protocols that send
// them already wait out a missing member (the quorum's grace window, the stall timeout).

const (
	// resendWindow is how far back, from the reset, written frames are sent again: the
	// time a write into a dead connection can take to draw the reset (a round trip, or a
	// few probe timeouts when the packets went out while no process held the port).
	resendWindow = 5 * time.Second
	// resendMaxFrame is the largest payload kept for resending.
	resendMaxFrame = 64 << 10
	// resendMaxBytes bounds the payload bytes kept per connection (oldest dropped first).
	resendMaxBytes = 1 << 20
)

// sentFrame is a copy of a frame written on a connection, and when; orig is the caller's
// frame it copies (forget).
type sentFrame struct {
	at   time.Time
	f    *frame.Frame
	orig *frame.Frame
}

// remember keeps a copy of f, about to be written on c, for resendAfterReset. It comes
// before the write: a reset can end c as soon as the write has handed f to QUIC, and the
// resend must find f then (under -race, remembering after the write lost that race). It
// reports false when c has ended and its resend has run already (drained): nothing written
// on c now reaches the peer, and no resend will carry f (Send sends it again itself).
// Large frames are never kept, and report true.
func (c *peerConn) remember(f *frame.Frame) bool {
	if len(f.Payload) > resendMaxFrame {
		return true
	}
	cp := *f
	cp.Shape, cp.Payload = slices.Clone(f.Shape), slices.Clone(f.Payload)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drained {
		return false
	}
	c.recent = append(c.recent, sentFrame{at: now, f: &cp, orig: f})
	c.recentBytes += len(cp.Payload)
	drop := 0
	for drop < len(c.recent) && (c.recentBytes > resendMaxBytes || now.Sub(c.recent[drop].at) > resendWindow) {
		c.recentBytes -= len(c.recent[drop].f.Payload)
		drop++
	}
	c.recent = slices.Delete(c.recent, 0, drop)
	return true
}

// forget drops the copy of f (a write that failed: Send reports it or sends it again),
// and reports whether c still held it (false: never kept, or taken by the resend).
func (c *peerConn) forget(f *frame.Frame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.recent {
		if s.orig == f {
			c.recentBytes -= len(s.f.Payload)
			c.recent = slices.Delete(c.recent, i, i+1)
			return true
		}
	}
	return false
}

// takeRecent returns the kept frames written since `since`, oldest first, and forgets
// them all; c keeps no more (drained: it has ended).
func (c *peerConn) takeRecent(since time.Time) []*frame.Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drained = true
	var out []*frame.Frame
	for _, s := range c.recent {
		if !s.at.Before(since) {
			out = append(out, s.f)
		}
	}
	c.recent, c.recentBytes = nil, 0
	return out
}

// swallowed says whether a connection that ended by cause delivered none of what was
// written on it to the process that holds the peer's identity now: it ended in a stateless
// reset (that process never had it), or the peer closed it with ConnConfirmed (a Confirm's
// connection, which the peer closes once its handshake is done and never reads from; the
// side that accepted it sends on it at once, as on any connection a peer dialled, until
// the close arrives).
func swallowed(cause error) bool {
	var reset *quic.StatelessResetError
	var app *quic.ApplicationError
	return errors.As(cause, &reset) || errors.As(cause, &app) && app.Remote && app.ErrorCode == ConnConfirmed
}

// swallowedAll waits until c has ended (or ctx is done) and says whether it ended so that
// nothing written on it reached the peer's process (swallowed). quic-go fails a stream or
// an accept of a closed connection a moment before it cancels the connection's context,
// which carries the cause: read before that, a reset looked like no cause at all (seen
// under -race: the restarted peer's swallowed frames were dropped, not sent again).
func (c *peerConn) swallowedAll(ctx context.Context) bool {
	select {
	case <-c.qc.Context().Done():
	case <-ctx.Done():
		return false
	}
	return swallowed(context.Cause(c.qc.Context()))
}

// resendAfterReset sends again, to the process that holds the peer's identity now, the
// frames of the last resendWindow written on c when c ended so that none reached it
// (swallowed); otherwise it drops them. It runs once c has ended (serveConn).
func (d *Plane) resendAfterReset(c *peerConn) {
	if !c.swallowedAll(d.ctx) {
		c.takeRecent(time.Now().Add(time.Hour)) // nothing to resend: free the copies
		return
	}
	frames := c.takeRecent(time.Now().Add(-resendWindow))
	if len(frames) == 0 {
		return
	}
	d.log.Info("resending the frames a connection swallowed (the peer restarted, or it was a peer's address check)", "peer", c.peer, "frames", len(frames))
	for _, f := range frames {
		if err := d.Send(d.ctx, c.peer, f); err != nil {
			d.log.Warn("resend of swallowed frames", "peer", c.peer, "err", err)
			return
		}
		d.stats.resent(c.peer)
	}
}

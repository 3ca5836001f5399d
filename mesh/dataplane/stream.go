package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Stream error codes of the data plane, sent in STOP_SENDING by a receiver that rejects a
// frame, or in RESET_STREAM by a sender that abandons one. Values are append-only.
const (
	// FrameResetWriteAborted: the sender gave up on a frame it had begun to write (its
	// context ended or the write failed); the receiver discards the partial frame.
	FrameResetWriteAborted quic.StreamErrorCode = 0x100
	// FrameResetMagic: the frame did not start with the magic "MNTF".
	FrameResetMagic quic.StreamErrorCode = 0x101
	// FrameResetVersion: unsupported frame version.
	FrameResetVersion quic.StreamErrorCode = 0x102
	// FrameResetKind: unknown frame kind.
	FrameResetKind quic.StreamErrorCode = 0x103
	// FrameResetHeader: malformed header (dtype, codec, ndim, reserved bytes, shape).
	FrameResetHeader quic.StreamErrorCode = 0x104
	// FrameResetTooBig: the payload length exceeds the receiver's MaxPayload.
	FrameResetTooBig quic.StreamErrorCode = 0x105
	// FrameResetCRC: the CRC32C does not match.
	FrameResetCRC quic.StreamErrorCode = 0x106
	// FrameResetTruncated: the stream ended in the middle of a frame.
	FrameResetTruncated quic.StreamErrorCode = 0x107
)

// Connection error codes of the data plane, sent in CONNECTION_CLOSE. Append-only.
const (
	// ConnShutdown: the node's data plane is closing.
	ConnShutdown quic.ApplicationErrorCode = 0x200
	// ConnMailboxFull: the peer sent more unclaimed payload than MailboxBytes.
	ConnMailboxFull quic.ApplicationErrorCode = 0x201
	// ConnNotAllowed: the peer is authenticated but AllowPeer refused it.
	ConnNotAllowed quic.ApplicationErrorCode = 0x202
	// ConnBadIdentity: the peer's certificate is not the expected peer ID.
	ConnBadIdentity quic.ApplicationErrorCode = 0x203
	// ConnMoved closes the connection to a peer that announced a new address (it
	// restarted): frames must go to where it is now.
	ConnMoved quic.ApplicationErrorCode = 0x204
	// ConnTooMany closes a peer's oldest connection when it opened more than
	// MaxConnsPerPeer.
	ConnTooMany quic.ApplicationErrorCode = 0x205
	// ConnConfirmed closes the connection Confirm opened once its handshake proved the
	// peer's identity at the address tried: nothing is sent on it.
	ConnConfirmed quic.ApplicationErrorCode = 0x206
	// ConnRestarted closes the connections to a peer that restarted (the caller said so:
	// DropConnsBefore): they lead to its old process.
	ConnRestarted quic.ApplicationErrorCode = 0x207
	// ConnMisbehaved closes the connections of a peer the engine caught sending what the
	// protocol never sends (Misbehaved).
	ConnMisbehaved quic.ApplicationErrorCode = 0x208
)

// frameResetCode maps a frame.Read error to the code that resets the stream; bad is false
// for errors that are not the peer's frame's fault (clean end, reset, closed connection).
func frameResetCode(err error) (code quic.StreamErrorCode, bad bool) {
	switch {
	case errors.Is(err, frame.ErrMagic):
		return FrameResetMagic, true
	case errors.Is(err, frame.ErrVersion):
		return FrameResetVersion, true
	case errors.Is(err, frame.ErrKind):
		return FrameResetKind, true
	case errors.Is(err, frame.ErrHeader):
		return FrameResetHeader, true
	case errors.Is(err, frame.ErrTooBig):
		return FrameResetTooBig, true
	case errors.Is(err, frame.ErrCRC):
		return FrameResetCRC, true
	case err != io.EOF && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return FrameResetTruncated, true // FIN inside a frame
	}
	return 0, false
}

// readStream reads frames from one incoming stream into the mailbox, attributed to the
// connection's authenticated peer, until the stream ends or a frame is bad.
func (d *Plane) readStream(c *peerConn, s *quic.ReceiveStream) {
	defer d.wg.Done()
	for {
		f, err := d.readFrame(s)
		if err != nil {
			d.endStream(c, s, err)
			return
		}
		d.stats.count(dirReceived, c.peer, c.path, f)
		if f.Kind == frame.KindProbe {
			d.handleProbeFrame(c.peer, f) // answered or consumed here, never mailed
			continue
		}
		if err := d.box.Deliver(c.peer, f); err != nil {
			if errors.Is(err, frame.ErrMailboxFull) {
				d.stats.overflow(c.peer)
				d.log.Warn("peer overflowed the mailbox; disconnecting", "peer", c.peer, "err", err)
				c.qc.CloseWithError(ConnMailboxFull, "mailbox full")
			}
			return
		}
	}
}

// readFrame reads one frame within the in-flight budget: the header, then a reservation
// of its payload length (waiting, unread, while the budget is full), then the payload.
func (d *Plane) readFrame(s io.Reader) (*frame.Frame, error) {
	h, err := frame.ReadHeader(s, d.maxPayload)
	if err != nil {
		return nil, err
	}
	n := int64(h.PayloadLen())
	if err := d.inflight.acquire(d.ctx, n); err != nil {
		return nil, err // closing
	}
	defer d.inflight.release(n)
	return h.ReadPayload(s)
}

func (d *Plane) endStream(c *peerConn, s *quic.ReceiveStream, err error) {
	code, bad := frameResetCode(err)
	if !bad {
		return // a clean end, a reset by the sender or a closed connection
	}
	s.CancelRead(code)
	d.stats.badFrame(c.peer)
	d.log.Warn("bad frame; stream reset", "peer", c.peer, "stream", s.StreamID(), "code", uint64(code), "err", err)
}

// kindStream is the outgoing stream of one frame kind on one connection, opened on
// first use and replaced after a failed write. One frame is written at a time.
type kindStream struct {
	turn chan struct{} // holds a token while no frame is being written
	s    *quic.SendStream
}

func (c *peerConn) sendStream(k frame.Kind) *kindStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss := c.streams[k]
	if ss == nil {
		ss = &kindStream{turn: make(chan struct{}, 1)}
		ss.turn <- struct{}{}
		c.streams[k] = ss
	}
	return ss
}

// write writes one frame, given as its header and payload, without interleaving with
// other frames. If ctx ends mid-frame the stream is reset (the receiver drops the partial
// frame) and the next frame goes on a new stream.
func (ss *kindStream) write(ctx context.Context, qc *quic.Conn, parts ...[]byte) error {
	select {
	case <-ss.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { ss.turn <- struct{}{} }()
	if ss.s == nil {
		s, err := qc.OpenUniStreamSync(ctx)
		if err != nil {
			return fmt.Errorf("open stream: %w", err)
		}
		ss.s = s
	}
	s := ss.s
	stop := context.AfterFunc(ctx, func() { s.CancelWrite(FrameResetWriteAborted) })
	var err error
	for _, p := range parts {
		if _, err = s.Write(p); err != nil {
			break
		}
	}
	if !stop() && err == nil {
		// ctx ended as the write finished: the reset may have discarded part of it.
		err = fmt.Errorf("write interrupted: %w", ctx.Err())
	}
	if err != nil {
		s.CancelWrite(FrameResetWriteAborted)
		ss.s = nil
	}
	return err
}

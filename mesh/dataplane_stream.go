package mesh

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/quic-go/quic-go"
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
	// DataConnShutdown: the node's data plane is closing.
	DataConnShutdown quic.ApplicationErrorCode = 0x200
	// DataConnMailboxFull: the peer sent more unclaimed payload than MailboxBytes.
	DataConnMailboxFull quic.ApplicationErrorCode = 0x201
	// DataConnNotAllowed: the peer is authenticated but AllowPeer refused it.
	DataConnNotAllowed quic.ApplicationErrorCode = 0x202
	// DataConnBadIdentity: the peer's certificate is not the expected peer ID.
	DataConnBadIdentity quic.ApplicationErrorCode = 0x203
	// DataConnMoved closes the connection to a peer that announced a new address (it
	// restarted): frames must go to where it is now.
	DataConnMoved quic.ApplicationErrorCode = 0x204
)

// frameResetCode maps a ReadFrame error to the code that resets the stream; bad is false
// for errors that are not the peer's frame's fault (clean end, reset, closed connection).
func frameResetCode(err error) (code quic.StreamErrorCode, bad bool) {
	switch {
	case errors.Is(err, ErrFrameMagic):
		return FrameResetMagic, true
	case errors.Is(err, ErrFrameVersion):
		return FrameResetVersion, true
	case errors.Is(err, ErrFrameKind):
		return FrameResetKind, true
	case errors.Is(err, ErrFrameHeader):
		return FrameResetHeader, true
	case errors.Is(err, ErrFrameTooBig):
		return FrameResetTooBig, true
	case errors.Is(err, ErrFrameCRC):
		return FrameResetCRC, true
	case err != io.EOF && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return FrameResetTruncated, true // FIN inside a frame
	}
	return 0, false
}

// readStream reads frames from one incoming stream into the mailbox, attributed to the
// connection's authenticated peer, until the stream ends or a frame is bad.
func (d *DataPlane) readStream(c *dpConn, s *quic.ReceiveStream) {
	defer d.wg.Done()
	for {
		f, err := ReadFrame(s, d.maxPayload)
		if err != nil {
			d.endStream(c, s, err)
			return
		}
		d.stats.count(dirReceived, c.peer, f)
		if f.Kind == KindProbe {
			d.handleProbeFrame(c, f) // answered or consumed here, never mailed
			continue
		}
		if err := d.box.Deliver(c.peer, f); err != nil {
			if errors.Is(err, ErrMailboxFull) {
				d.stats.overflow(c.peer)
				d.log.Warn("peer overflowed the mailbox; disconnecting", "peer", c.peer, "err", err)
				c.qc.CloseWithError(DataConnMailboxFull, "mailbox full")
			}
			return
		}
	}
}

func (d *DataPlane) endStream(c *dpConn, s *quic.ReceiveStream, err error) {
	code, bad := frameResetCode(err)
	if !bad {
		return // a clean end, a reset by the sender or a closed connection
	}
	s.CancelRead(code)
	d.stats.badFrame(c.peer)
	d.log.Warn("bad frame; stream reset", "peer", c.peer, "stream", s.StreamID(), "code", uint64(code), "err", err)
}

// dpSendStream is the outgoing stream of one frame kind on one connection, opened on
// first use and replaced after a failed write. One frame is written at a time.
type dpSendStream struct {
	turn chan struct{} // holds a token while no frame is being written
	s    *quic.SendStream
}

func (c *dpConn) sendStream(k FrameKind) *dpSendStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss := c.streams[k]
	if ss == nil {
		ss = &dpSendStream{turn: make(chan struct{}, 1)}
		ss.turn <- struct{}{}
		c.streams[k] = ss
	}
	return ss
}

// write writes one frame, given as its header and payload, without interleaving with
// other frames. If ctx ends mid-frame the stream is reset (the receiver drops the partial
// frame) and the next frame goes on a new stream.
func (ss *dpSendStream) write(ctx context.Context, qc *quic.Conn, parts ...[]byte) error {
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

// appendFrameHeader appends the FrameHeaderSize-byte header AppendFrame would write for f,
// so that the payload can be written from the caller's slice instead of being copied: it
// encodes f without payload, then sets the length and the CRC32C of header and payload.
// TestAppendFrameHeaderMatchesAppendFrame keeps it equal to AppendFrame.
func appendFrameHeader(dst []byte, f *Frame) ([]byte, error) {
	if uint64(len(f.Payload)) > 1<<32-1 {
		return dst, fmt.Errorf("%w: %d bytes", ErrFrameTooBig, len(f.Payload))
	}
	empty := *f
	empty.Payload = nil
	out, err := AppendFrame(dst, &empty)
	if err != nil {
		return dst, err
	}
	h := out[len(dst):]
	binary.LittleEndian.PutUint32(h[48:], uint32(len(f.Payload)))
	crc := crc32.Update(crc32.Checksum(h[:52], castagnoli), castagnoli, f.Payload)
	binary.LittleEndian.PutUint32(h[52:], crc)
	return out, nil
}

package mesh

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	pool "github.com/libp2p/go-buffer-pool"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The probe protocol (ProtocolProbe) is a sequence of frames, each a kind byte and a
// big-endian uint32 length followed by that many bytes:
//
//	ping     length 8, an opaque token      → pong with the same 8 bytes
//	data     length n ≤ MaxProbeBytes bytes → data-ack, length 4: n as uint32
//
// The server reads frames until the client closes its side. Lengths are checked per kind
// before anything is read; data payloads are streamed through a pooled buffer and
// discarded, never allocated whole.
const (
	probePing    byte = 1
	probePong    byte = 2
	probeData    byte = 3
	probeDataAck byte = 4

	probeHeaderLen = 5
	probeTokenLen  = 8

	// MaxProbeBytes bounds one bandwidth transfer, on both sides.
	MaxProbeBytes = 256 << 20
)

// errProbeProtocol marks a malformed probe frame.
var errProbeProtocol = errors.New("probe protocol violation")

type probeHeader struct {
	kind byte
	n    uint32
}

// parseProbeHeader checks a frame header: the kind must be one the server accepts
// (ping or data) and the length must fit that kind.
func parseProbeHeader(b [probeHeaderLen]byte, kinds ...byte) (probeHeader, error) {
	h := probeHeader{kind: b[0], n: binary.BigEndian.Uint32(b[1:])}
	if !slices.Contains(kinds, h.kind) {
		return h, fmt.Errorf("%w: unexpected frame kind %d", errProbeProtocol, h.kind)
	}
	switch h.kind {
	case probePing, probePong:
		if h.n != probeTokenLen {
			return h, fmt.Errorf("%w: ping length %d, want %d", errProbeProtocol, h.n, probeTokenLen)
		}
	case probeData:
		if h.n > MaxProbeBytes {
			return h, fmt.Errorf("%w: data length %d exceeds %d", errProbeProtocol, h.n, MaxProbeBytes)
		}
	case probeDataAck:
		if h.n != 4 {
			return h, fmt.Errorf("%w: data-ack length %d, want 4", errProbeProtocol, h.n)
		}
	}
	return h, nil
}

func readProbeHeader(r io.Reader, kinds ...byte) (probeHeader, error) {
	var b [probeHeaderLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return probeHeader{}, err
	}
	return parseProbeHeader(b, kinds...)
}

func writeProbeHeader(w io.Writer, kind byte, n uint32) error {
	var b [probeHeaderLen]byte
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:], n)
	_, err := w.Write(b[:])
	return err
}

// writeProbeFrame writes a small frame (ping, pong, data-ack) in one write.
func writeProbeFrame(w io.Writer, kind byte, body []byte) error {
	var b [probeHeaderLen + probeTokenLen]byte
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	n := copy(b[probeHeaderLen:], body)
	_, err := w.Write(b[:probeHeaderLen+n])
	return err
}

// serveProbe answers frames from r on w until r ends cleanly (nil) or a frame is
// malformed (an error wrapping errProbeProtocol) or the stream fails.
func serveProbe(r io.Reader, w io.Writer) error {
	for {
		h, err := readProbeHeader(r, probePing, probeData)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch h.kind {
		case probePing:
			var token [probeTokenLen]byte
			if _, err := io.ReadFull(r, token[:]); err != nil {
				return err
			}
			err = writeProbeFrame(w, probePong, token[:])
		case probeData:
			if err := discardN(r, int64(h.n)); err != nil {
				return err
			}
			var n [4]byte
			binary.BigEndian.PutUint32(n[:], h.n)
			err = writeProbeFrame(w, probeDataAck, n[:])
		}
		if err != nil {
			return err
		}
	}
}

func discardN(r io.Reader, n int64) error {
	buf := pool.Get(64 << 10)
	defer pool.Put(buf)
	got, err := io.CopyBuffer(io.Discard, io.LimitReader(r, n), buf)
	if err == nil && got < n {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// handleProbe serves one probe stream. A malformed frame disconnects the peer.
func (m *Mesh) handleProbe(s network.Stream) {
	_ = s.SetDeadline(time.Now().Add(m.cfg.Probe.timeout()))
	err := serveProbe(s, s)
	if err == nil {
		_ = s.Close()
		return
	}
	_ = s.Reset()
	if errors.Is(err, errProbeProtocol) {
		m.malformed(s.Conn().RemotePeer(), string(ProtocolProbe), err)
		return
	}
	m.log.Debug("probe stream", "peer", s.Conn().RemotePeer(), "err", err)
}

// probePeer measures RTT and bandwidth towards p on one stream.
func (m *Mesh) probePeer(ctx context.Context, p peer.ID) (Link, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Probe.timeout())
	defer cancel()
	s, err := m.ah.NewStream(network.WithAllowLimitedConn(ctx, "probe"), p, ProtocolProbe)
	if err != nil {
		return Link{}, fmt.Errorf("open probe stream: %w", err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	link, err := runProbe(s, m.cfg.Probe)
	if err != nil {
		_ = s.Reset()
		return Link{}, err
	}
	_ = s.CloseWrite()
	_ = s.Close()
	return link, nil
}

// runProbe is the client side of one probe over rw: cfg.pings() pings, then bandwidth
// transfers doubling from cfg.minBytes() until one takes cfg.target() or reaches
// cfg.maxBytes().
func runProbe(rw io.ReadWriter, cfg ProbeConfig) (Link, error) {
	rtts := make([]time.Duration, 0, cfg.pings())
	for range cfg.pings() {
		rtt, err := pingOnce(rw)
		if err != nil {
			return Link{}, fmt.Errorf("ping: %w", err)
		}
		rtts = append(rtts, rtt)
	}
	slices.Sort(rtts)
	link := Link{RTT: rtts[len(rtts)/2]}
	buf := pool.Get(64 << 10)
	defer pool.Put(buf)
	size := cfg.minBytes()
	for {
		took, err := transferOnce(rw, size, buf)
		if err != nil {
			return Link{}, fmt.Errorf("bandwidth transfer of %d bytes: %w", size, err)
		}
		// The timed span includes one round trip for the ack; take it out when it is
		// small against the transfer.
		if took > 2*link.RTT {
			took -= link.RTT
		}
		link.BandwidthBps = float64(size) / took.Seconds()
		if took >= cfg.target() || size >= cfg.maxBytes() {
			break
		}
		next := size * 2
		if want := int(link.BandwidthBps * cfg.target().Seconds()); want > next {
			next = want // jump straight to the size the target asks for
		}
		size = min(next, cfg.maxBytes())
	}
	link.MeasuredAt = time.Now()
	return link, nil
}

func pingOnce(rw io.ReadWriter) (time.Duration, error) {
	var token [probeTokenLen]byte
	binary.BigEndian.PutUint64(token[:], rand.Uint64())
	start := time.Now()
	if err := writeProbeFrame(rw, probePing, token[:]); err != nil {
		return 0, err
	}
	if _, err := readProbeHeader(rw, probePong); err != nil {
		return 0, err
	}
	var got [probeTokenLen]byte
	if _, err := io.ReadFull(rw, got[:]); err != nil {
		return 0, err
	}
	if got != token {
		return 0, fmt.Errorf("%w: pong token mismatch", errProbeProtocol)
	}
	return time.Since(start), nil
}

// transferOnce sends one data frame of size bytes and waits for its ack.
func transferOnce(rw io.ReadWriter, size int, buf []byte) (time.Duration, error) {
	start := time.Now()
	if err := writeProbeHeader(rw, probeData, uint32(size)); err != nil {
		return 0, err
	}
	for left := size; left > 0; {
		n := min(left, len(buf))
		if _, err := rw.Write(buf[:n]); err != nil {
			return 0, err
		}
		left -= n
	}
	if _, err := readProbeHeader(rw, probeDataAck); err != nil {
		return 0, err
	}
	var n [4]byte
	if _, err := io.ReadFull(rw, n[:]); err != nil {
		return 0, err
	}
	if got := binary.BigEndian.Uint32(n[:]); got != uint32(size) {
		return 0, fmt.Errorf("%w: peer acknowledged %d bytes, sent %d", errProbeProtocol, got, size)
	}
	return time.Since(start), nil
}

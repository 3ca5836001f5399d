package dataplane

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Incoming connections are unauthenticated until their QUIC/TLS handshake proves the
// peer's identity (remotePeerID). Until then they cost state and a goroutine each, so they
// are bounded in number (MaxHandshakes: one more is refused before any handshake work) and
// in time (HandshakeTimeout: quic-go ends a handshake after twice the listener's handshake
// idle timeout, which is set to half of it).

// errTooManyHandshakes refuses a connection attempt while MaxHandshakes are in progress.
var errTooManyHandshakes = errors.New("too many handshakes in progress")

// handshakes counts the incoming connections still in their handshake.
type handshakes struct {
	mu      sync.Mutex
	n, max  int
	refused int64
}

func (h *handshakes) acquire() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n >= h.max {
		h.refused++
		return false
	}
	h.n++
	return true
}

func (h *handshakes) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
}

func (h *handshakes) snapshot() (inProgress, refused int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int64(h.n), h.refused
}

// handshakeSlot is one connection's place among the handshakes, given back once: when
// the handshake completes (acceptLoop) or the connection ends first.
type handshakeSlot struct{ release func() }

type slotKey struct{}

// connContext is the transport's ConnContext: it takes a handshake slot for every
// incoming connection attempt, or refuses the attempt when none is free.
func (d *Plane) connContext(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	if !d.hs.acquire() {
		return nil, errTooManyHandshakes
	}
	s := &handshakeSlot{release: sync.OnceFunc(d.hs.release)}
	context.AfterFunc(ctx, s.release)
	return context.WithValue(ctx, slotKey{}, s), nil
}

// handshakeDone gives back qc's handshake slot: it is authenticated now.
func handshakeDone(qc *quic.Conn) {
	if s, ok := qc.Context().Value(slotKey{}).(*handshakeSlot); ok {
		s.release()
	}
}

// serverQUICConfig is qconf for incoming connections: their handshake ends after
// HandshakeTimeout.
func (c Config) serverQUICConfig(qconf *quic.Config) *quic.Config {
	sc := qconf.Clone()
	sc.HandshakeIdleTimeout = max(c.handshakeTimeout()/2, time.Millisecond)
	return sc
}

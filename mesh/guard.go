package mesh

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// admittedHost is the host as the mesh's own services see it (the DHT, gossipsub, the
// probes, and whatever registers through Mesh.Handle): every stream handler waits for the
// remote peer's admission and resets the stream if it is refused, and NewStream waits for
// the remote's admission before opening anything. libp2p's own protocols (identify,
// AutoNAT, hole punching, relay) keep using the plain host, so NAT traversal works before
// admission.
type admittedHost struct {
	host.Host
	a *admission
}

// SetStreamHandler registers handler behind the admission guard.
func (h admittedHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, h.guard(pid, handler))
}

// SetStreamHandlerMatch registers handler behind the admission guard.
func (h admittedHost) SetStreamHandlerMatch(pid protocol.ID, match func(protocol.ID) bool, handler network.StreamHandler) {
	h.Host.SetStreamHandlerMatch(pid, match, h.guard(pid, handler))
}

// NewStream connects to p if needed, waits for p's admission and opens a stream. A member
// reached only through a relay (a limited connection: both ends behind NATs, no hole
// punched) is a member like any other, so the stream may ride that connection; the relay
// bounds what it carries (RelayConfig). A direct connection is preferred when there is one.
func (h admittedHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	ctx = network.WithAllowLimitedConn(ctx, "meshnode member")
	if !connectedAny(h.Host.Network(), p) {
		if err := h.Host.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
			return nil, err
		}
	}
	if !h.a.wait(ctx, p) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("open %v to %s: %w", pids, p, err)
		}
		return nil, fmt.Errorf("open %v to %s: %w", pids, p, ErrNotAdmitted)
	}
	return h.Host.NewStream(ctx, p, pids...)
}

func (h admittedHost) guard(pid protocol.ID, handler network.StreamHandler) network.StreamHandler {
	return func(s network.Stream) {
		p := s.Conn().RemotePeer()
		ctx, cancel := context.WithTimeout(h.a.ctx, h.a.timeout)
		ok := h.a.wait(ctx, p)
		cancel()
		if !ok {
			h.a.refused.Add(1)
			h.a.log.Info("refused stream from a peer not admitted", "peer", p, "protocol", pid)
			_ = s.Reset()
			return
		}
		handler(s)
	}
}

package dataplane

import (
	"context"
	"fmt"
)

// Confirm dials peerID at addr, as Send would, and closes the connection (ConnConfirmed)
// as soon as its handshake has proven that the server there holds peerID's key. It
// returns nil when the address reaches the peer, and an error otherwise: no route, no
// answer before ctx or DialTimeout ends, or another node answering (the handshake fails
// on the certificate, with nothing sent). It neither records addr nor touches the
// connections frames go out on; the caller does that with SetPeerAddr.
//
// Each call sends a QUIC handshake to addr: callers that take addr from the network bound
// how many addresses they confirm and how often.
func (d *Plane) Confirm(ctx context.Context, peerID, addr string) error {
	if d.ctx.Err() != nil {
		return ErrClosed
	}
	qc, err := d.handshake(ctx, peerID, addr)
	if err != nil {
		return err
	}
	d.log.Debug("confirmed address", "peer", peerID, "addr", addr)
	if err := qc.CloseWithError(ConnConfirmed, "address confirmed"); err != nil {
		return fmt.Errorf("data plane: close confirmed connection to %s: %w", peerID, err)
	}
	return nil
}

// Connected reports whether the data plane holds an open connection with peerID, in
// either direction: frames to it go out without a dial.
func (d *Plane) Connected(peerID string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peers[peerID]
	return p != nil && p.sendConn() != nil
}

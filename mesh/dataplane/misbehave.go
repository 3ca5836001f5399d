package dataplane

import "github.com/libp2p/go-libp2p/core/network"

// Misbehaved disconnects peer, which the engine caught sending what the protocol never
// sends (parallel.MisbehaviourReporter: a stage's anchors of the wrong length, a codec its
// round does not use, a signed contribution that does not decode): the data plane closes
// every QUIC connection with it (ConnMisbehaved; none counts as held once it returns)
// and resets its libp2p streams and closes their connections, as it does for a peer that
// floods its mailbox, then asks the node to close the rest (Config.Disconnect). It is
// counted (Stats.Misbehaved) and logged with the reason. The peer stays a member and may connect again: each violation costs it its
// connections and whatever it had in flight, and the engine's step that met it fails or
// drops its data as before, so the node keeps serving the others. Frames it sent that
// wait in the mailbox stay there, within its bounds, until claimed or purged.
func (d *Plane) Misbehaved(peer, reason string) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	var conns []*peerConn
	for c := range d.conns {
		if c.peer == peer {
			conns = append(conns, c)
		}
	}
	if p := d.peers[peer]; p != nil {
		p.conn = nil // the next Send dials or takes a connection the peer opens anew
		// They are closed below: none counts as held from here on (openConns, the
		// per-peer limit), before each one's reader sees its end and forgets it.
		p.open = nil
	}
	var streams []network.Stream
	for s := range d.p2p {
		if s.Conn().RemotePeer().String() == peer {
			streams = append(streams, s)
		}
	}
	d.mu.Unlock()
	d.stats.misbehaved(peer)
	d.log.Warn("peer broke the protocol; disconnecting", "peer", peer, "reason", reason)
	for _, c := range conns {
		c.qc.CloseWithError(ConnMisbehaved, "protocol violation")
	}
	for _, s := range streams {
		_ = s.Reset()
		_ = s.Conn().Close()
	}
	if d.cfg.Disconnect != nil {
		d.cfg.Disconnect(peer, reason)
	}
}

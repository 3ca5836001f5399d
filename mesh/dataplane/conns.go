package dataplane

import (
	"slices"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// adopt registers an authenticated connection, makes it the peer's send connection when
// it has none or the peer dialled it, and serves the streams the peer opens on it. A peer holds at most
// MaxConnsPerPeer connections: adopting one more closes its oldest (ConnTooMany), so that a
// peer cannot multiply the memory its streams may hold by opening connections, while a
// peer that restarted is never locked out by connections to its old process.
func (d *Plane) adopt(qc *quic.Conn, remote, path string) (*peerConn, error) {
	c := &peerConn{qc: qc, peer: remote, path: path, at: time.Now(), streams: map[frame.Kind]*kindStream{}}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		qc.CloseWithError(ConnShutdown, "data plane closed")
		return nil, ErrClosed
	}
	d.conns[c] = struct{}{}
	p := d.peers[remote]
	if p == nil {
		p = &sendPeer{}
		d.peers[remote] = p
	}
	var evicted []*peerConn
	for len(p.open) >= d.cfg.maxConnsPerPeer() {
		old := p.open[0]
		p.open = p.open[1:]
		evicted = append(evicted, old)
		if p.conn == old {
			p.conn = nil
		}
	}
	p.open = append(p.open, c)
	if p.conn == nil || !p.conn.alive() || path == PathInbound {
		// A connection the peer just dialled is the one frames go out on: the peer may have
		// restarted, and the connection to its old process swallows what is written into it
		// until the new process's stateless reset closes it (reset.go), losing that frame;
		// the peer's newest connection reaches whatever process holds its identity now. When
		// both dialled at once, each sends on the other's connection: both are alive.
		p.conn = c
	}
	d.wg.Add(1)
	d.mu.Unlock()
	for _, old := range evicted {
		d.stats.connEvicted(remote)
		d.log.Info("too many connections from peer; closed its oldest", "peer", remote, "limit", d.cfg.maxConnsPerPeer())
		old.qc.CloseWithError(ConnTooMany, "too many connections")
	}
	go d.serveConn(c)
	return c, nil
}

// serveConn starts a reader for every stream the peer opens, until the connection ends.
func (d *Plane) serveConn(c *peerConn) {
	defer d.wg.Done()
	defer d.resendAfterReset(c) // after forget: a resend must not pick c again
	defer d.forget(c)
	for {
		s, err := c.qc.AcceptUniStream(d.ctx)
		if err != nil {
			d.log.Debug("connection ended", "peer", c.peer, "err", err)
			return
		}
		d.wg.Add(1)
		go d.readStream(c, s)
	}
}

func (d *Plane) forget(c *peerConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.conns, c)
	if p := d.peers[c.peer]; p != nil {
		if p.conn == c {
			p.conn = nil
		}
		p.open = slices.DeleteFunc(p.open, func(o *peerConn) bool { return o == c })
	}
}

// openConns is the number of connections with peer that the data plane holds.
func (d *Plane) openConns(peer string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[peer]; p != nil {
		return len(p.open)
	}
	return 0
}

// DropConnsBefore closes the connections with peer adopted before t: the caller knows
// that the peer's process then is gone (the mesh held it dead and heard it again: it
// restarted). Without this, the first frame written into such a connection is lost before
// the new process's stateless reset closes it (reset.go), and a protocol that sends a
// frame once (a rebuild's step, a pipeline's activation) waits for it until it times out.
// Connections adopted since t are kept: they may already carry the new process's frames.
// It returns the number closed.
func (d *Plane) DropConnsBefore(peer string, t time.Time) int {
	d.mu.Lock()
	var stale []*peerConn
	if p := d.peers[peer]; p != nil {
		for _, c := range p.open {
			if c.at.Before(t) {
				stale = append(stale, c)
			}
		}
		if p.conn != nil && p.conn.at.Before(t) {
			p.conn = nil // the next Send takes a newer connection or dials
		}
	}
	d.mu.Unlock()
	for _, c := range stale {
		d.log.Info("closing a connection to a restarted peer's old process", "peer", peer)
		c.qc.CloseWithError(ConnRestarted, "peer restarted")
	}
	return len(stale)
}

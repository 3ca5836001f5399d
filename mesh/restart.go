package mesh

import (
	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

// A member that restarts with its identity (kill -9, then the same data dir) dials its
// peers anew, while they still hold their connections to the dead process: their
// gossipsub keeps its stream to the member on such a connection, so the member never
// learns that they subscribe to the heartbeat topic, and they do not hear it, until that
// connection's idle timeout closes it (about 30 s on QUIC). dropStaleConns closes those
// older connections as soon as a new one arrives from a member the peer table holds dead:
// gossipsub then opens its streams on the new connection, and the member is heard within
// a heartbeat or two. Config.OnRestarted tells the node, whose data plane holds QUIC
// connections to the old process of its own (mesh/dataplane DropConnsBefore).

// watchRestarts registers dropStaleConns for every new connection.
func (m *Mesh) watchRestarts() {
	m.host.Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		go m.dropStaleConns(c)
	}})
}

// dropStaleConns closes the other connections to c's peer when the peer table holds it
// dead: they belong to a process that is gone.
func (m *Mesh) dropStaleConns(c network.Conn) {
	p := c.RemotePeer()
	dead := m.table.deadSince(p)
	if dead.IsZero() {
		return
	}
	if m.cfg.OnRestarted != nil {
		m.cfg.OnRestarted(p, dead) // the data plane drops its connections to the old process
	}
	for _, old := range m.host.Network().ConnsToPeer(p) {
		if old != c && !sameConn(old, c) {
			m.log.Info("closing a connection to a restarted member's old process", "peer", p, "addr", old.RemoteMultiaddr())
			_ = old.Close()
		}
	}
}

// sameConn reports whether a and b are the same connection seen twice.
func sameConn(a, b network.Conn) bool {
	return a.ID() == b.ID() && equalAddr(a.RemoteMultiaddr(), b.RemoteMultiaddr())
}

func equalAddr(a, b ma.Multiaddr) bool { return a != nil && b != nil && a.Equal(b) }

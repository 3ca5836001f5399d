package mesh

import "github.com/libp2p/go-libp2p/core/peer"

// Isolate cuts this node off from peers: the connection gater refuses every dial to and
// every connection from them, and the connections open to them are closed, so that no
// heartbeat, Raft message, probe or blob crosses until a later call replaces the set (nil
// or empty ends the isolation). It is the testnet's control-plane partition (node's
// PartitionHookEnv, docs/testnet.md): nothing in the mesh's protocols calls it, and no
// peer can ask for it.
func (m *Mesh) Isolate(peers []peer.ID) {
	m.gater.isolate(peers)
	for _, p := range peers {
		_ = m.host.Network().ClosePeer(p)
	}
	m.log.Info("isolation set", "peers", len(peers))
}

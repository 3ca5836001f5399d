package mesh

import "github.com/libp2p/go-libp2p/core/peer"

// SetLink records a measurement of the link to p made outside the mesh's own probe loop,
// such as the node's data-plane probes (l.Source = LinkDataPlane; empty means
// LinkLibp2p). Peers() then shows it in Links, and in Link when it is preferred. A peer
// not in the peer table is ignored.
func (m *Mesh) SetLink(p peer.ID, l Link) { m.table.setLink(p, l) }

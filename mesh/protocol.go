package mesh

import "github.com/libp2p/go-libp2p/core/protocol"

// Stream protocols of a meshnode mesh. The IDs are versioned: a change to a wire format
// gets a new ID rather than a new meaning for an old one.
const (
	// ProtocolAuth proves knowledge of the join secret right after a connection opens.
	// It is the only meshnode protocol served to peers not yet admitted.
	ProtocolAuth protocol.ID = "/meshnode/auth/1.0.0"
	// ProtocolProbe measures round-trip time and bandwidth between two peers.
	ProtocolProbe protocol.ID = "/meshnode/probe/1.0.0"

	// dhtPrefix is the Kademlia protocol prefix: the DHT speaks "/meshnode/kad/1.0.0", so
	// it never mixes with the public IPFS DHT.
	dhtPrefix protocol.ID = "/meshnode"
)

// HeartbeatTopic is the gossipsub topic on which the members of mesh publish heartbeats.
func HeartbeatTopic(mesh string) string { return "meshnode/" + mesh + "/heartbeat" }

// rendezvous is the DHT namespace under which members of mesh advertise themselves.
func rendezvous(mesh string) string { return "meshnode/" + mesh }

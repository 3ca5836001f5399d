package consensus

import "github.com/libp2p/go-libp2p/core/protocol"

// Stream protocols of the control plane. The IDs are versioned: a change to a wire format
// gets a new ID rather than a new meaning for an old one. Both open with a handshake
// (handshake.go) that carries the cluster ID, and both are served only to the peers
// access.go admits.
const (
	// ProtocolRaft carries raft's NetworkTransport RPCs between members of the group.
	ProtocolRaft protocol.ID = "/meshnode/raft/1.0.0"
	// ProtocolRPC forwards writes to the leader and serves consistent reads (rpc.go).
	ProtocolRPC protocol.ID = "/meshnode/rpc/1.0.0"
)

// Package dataplane moves tensor frames (package frame) between nodes over QUIC, on its own
// UDP port, with TLS bound to the nodes' libp2p identities: one connection per pair of
// nodes, one unidirectional stream per frame kind, every incoming frame bounded before
// allocation and delivered into a Mailbox for the engine to receive by key. It also
// measures links over that same path (Probe).
//
// A Plane satisfies the engine's Transport (Self, Send, Recv). Which peers may connect is
// the caller's policy (Config.AllowPeer); where peers listen is told by the caller
// (SetPeerAddr); which jobs this node runs, so that frames of others expire, too
// (Config.RunsJob). Towards a peer no QUIC path reaches (both behind NATs), the same frames
// ride libp2p streams that the caller opens (Config.OpenStream, on a relayed or
// hole-punched connection) and hands in (ServeStream), read with the same bounds. A peer
// the engine caught sending what the protocol never sends is disconnected (Misbehaved,
// the engine's parallel.MisbehaviourReporter), as one that floods its mailbox is; the
// node closes the rest of its connections (Config.Disconnect).
//
// dataplane must not depend on the membership layer (package mesh), consensus or the
// engine: it knows peer IDs and addresses only, and it never interprets a payload.
package dataplane

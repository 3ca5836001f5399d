// Package mesh is meshnode's peer-to-peer layer: the libp2p host (QUIC-v1 and TCP), the
// node's persistent identity, discovery (bootstrap addresses, mDNS, Kademlia rendezvous on
// the mesh name), NAT traversal as go-libp2p offers it (port mapping, AutoNAT, hole
// punching, relay v2), admission of peers by a join secret and an optional allowlist, signed
// heartbeats over gossipsub that carry each node's measured Profile, the peer table built
// from them, and link probes (RTT and bandwidth) between peers.
//
// Admission is the package's central guarantee: a peer is admitted only after it proved
// knowledge of the mesh's join secret on ProtocolAuth, bound to both peer IDs. Until then
// every other protocol the mesh serves or opens (its own, the DHT's and gossipsub's) waits.
// A peer that sends a wrong proof is disconnected and banned by the connection gater for
// the ban duration; a peer that is only slow gets the exchange again with more time, and
// one silent through every attempt is disconnected and held off briefly. Every refusal
// expires and the gater holds a bounded number of them.
//
// The other meshnode protocols live in their own packages, one per protocol as go-libp2p
// does it: mesh/dataplane (the QUIC tensor data plane, on its own UDP port), mesh/frame
// (its wire format, which the engine imports without any network library) and mesh/blob
// (content-addressed blobs, served through Mesh.Handle and so behind admission).
//
// mesh depends on libraries only and imports none of those packages. It does not measure
// devices (package node does and hands the result in through SetProfile), keep job state
// (consensus) or plan anything (balancer).
package mesh

// Package testnet runs a local multi-node meshnode testnet of real processes on loopback:
// N `meshnode join` processes of one binary, each with its own data directory, ephemeral
// ports, an emulated slowdown (--slowdown) and memory budget, and emulated WAN links.
//
// WAN emulation is a userspace UDP relay (Relay) in front of each node's tensor data plane:
// a node advertises its relay's address (--data-advertise), the relay forwards to the
// node's real data-plane port, and every packet crosses an emulated directed link (Network)
// with the latency, bandwidth cap and loss of the pair of regions it connects. Link probes
// run over the data plane, so the balancer measures and plans on the emulated links.
// Only the data plane is shaped: libp2p traffic (heartbeats, Raft) goes directly over
// loopback. Partitions cut both planes between two regions or nodes: the relays drop the
// data plane's packets, and each node, told through its test-only partition hook
// (node.PartitionHookEnv), refuses and closes its libp2p connections to the other side.
//
// Testnet owns the processes and relays of one testnet; Supervisor-mode callers (the
// hidden `meshnode testnet supervise` command) keep a Testnet alive after the command that
// started it exits, and State (testnet.json) lets later commands find it. Summary turns a
// finished job's detail into the numbers `meshnode testnet run` prints.
//
// testnet imports node and mesh for addresses and runtime files, and consensus and
// balancer for the JSON shapes of the API it reads; it never imports cmd and never calls
// os.Exit. It needs no root: nothing touches the kernel's network configuration.
package testnet

// Package consensus is meshnode's replicated control plane: hashicorp/raft running over
// libp2p streams, and the finite-state machine that holds the mesh's job state (nodes, jobs,
// plan epochs, progress, checkpoint manifests, per-job event logs).
//
// Every change is a typed log message (a type byte and a JSON payload) applied by one flat
// switch in FSM.Apply. Anything non-deterministic (ids, timestamps, plan epochs) is decided
// on the leader before it proposes, so every replica computes the same state. Writes made on
// a follower are forwarded to the leader over the /meshnode/rpc/1.0.0 protocol; reads are
// served from the local FSM (with the index it has applied) or, when asked for a consistent
// read, by the leader after a barrier.
//
// Only members of the raft configuration speak raft or make member requests; a node joins
// (as a non-voter, promoted once caught up) and leaves only as the peer its connection
// authenticates; the leader authorizes every operation per caller and job; a cluster ID
// checked on every handshake keeps independently bootstrapped clusters apart; every log
// entry is validated before it is applied (docs/security.md). A member that sends what no
// honest member sends (offender evidence that does not decode, an evidence request past its
// bounds) is refused and then disconnected (misbehave.go, Consensus.Disconnects).
//
// The package takes a libp2p host.Host as a dependency and never creates one; it does not
// discover peers, gossip or measure anything: the node feeds it the live and dead members it
// learns from the mesh (Consensus.Reconcile). It never calls os.Exit and keeps no globals.
package consensus

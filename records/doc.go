// Package records holds the types the control plane replicates through Raft and the
// HTTP API serves: a job and its plans, progress, checkpoints and events, the job views,
// and the Raft group's status. Their JSON is a wire format: it is in every node's Raft
// log and snapshots and in every client's hands, so it changes only by adding fields
// (golden files under testdata/ pin it; `go test ./records -update` rewrites them after a
// deliberate addition).
//
// It is a leaf: it imports only the job spec (consensus/jobspec) and the standard library,
// so that the API client, the CLI and any program reading the API build without Raft,
// libp2p or QUIC. The engine's and the balancer's types are converted to these records
// at one place each, never embedded.
package records

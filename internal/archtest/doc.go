// Package archtest checks the promises of the import graph that docs/architecture.md
// draws, with the same `go list -deps` commands the page shows: the engine opens no
// sockets, the scheduler's decisions are pure, the API client builds without Raft, libp2p
// or QUIC, and the replicated records are a leaf. It has tests only.
package archtest

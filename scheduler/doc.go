// Package scheduler is the leader's decision logic for jobs, as pure functions of the
// control plane's state: which plan a submitted job gets, when a running job needs a new
// epoch (a node of its plan died, a worker failed, nodes joined that make it faster), from
// which checkpoint a new epoch resumes, when a job has failed for good, and which
// checkpoint files no job needs any more.
//
// It is shaped like nomad's scheduler: a Scheduler reads a State (jobs, members with their
// measured profiles, the clock) and returns Decisions; Apply hands them to a Committer,
// the one place that writes to the control plane. Harness implements both over plain data
// and records every decision, so each decision is tested in a table in milliseconds with
// an injected clock.
//
// The package must not do I/O, start goroutines or read the wall clock, and it imports no
// network package (no libp2p, mesh or consensus): it sees jobs and members through its own
// small data types, which the node fills from the FSM and the peer table.
package scheduler

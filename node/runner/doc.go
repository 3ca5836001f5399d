// Package runner is a node's side of a training job: it starts the worker that the job's
// current plan epoch gives the node and stops it when the epoch ends, trains it through
// parallel.TrainLoop with hooks that report progress to the control plane, write
// checkpoints (atomic file, blob, a replica on another node of the plan, then the
// manifest) and evaluate; it restores a worker from a checkpoint, copies the latest
// complete checkpoint of its jobs to this node, and frees checkpoint blobs no job needs.
// An epoch that continues the previous one in place is handed to the running worker
// (continue.go); a node such an epoch brings back (plan.rejoin) builds the running
// workers' plan and copies its state from a live replica instead (rejoin.go), every stage
// of a rebuilt multi-stage replica at one step (rebuild.go).
//
// A Runner is built from explicit dependencies (Config): the blob store and protocol, the
// control plane's writes, the data plane with the peers' addresses, and the dataset
// loader, each a small interface that the node implements. It never decides a plan and
// never holds the node: the leader's decisions live in package scheduler, the wiring in
// package node. It does not touch libp2p itself.
package runner

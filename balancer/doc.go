// Package balancer decides where a model's layers run: it cuts the layer list into
// contiguous pipeline stages sized to each node's measured speed, memory and links, groups
// nodes into data-parallel replicas, picks the micro-batch count, and predicts the step time
// and the bytes each link carries.
//
// Everything here is a pure function of its inputs: a read-only Snapshot of nodes and links
// and a Job built from the model's per-layer costs (model.LayerCost). The package does no
// I/O, starts no goroutines and never reads a clock, so the same inputs always give the same
// Plan, in tests, on the Raft leader and in `meshnode plan --simulate`.
//
// Strategies (jobspec.Strategy, the job's vocabulary): even (equal layer counts, the Sky
// Computing baseline), sky (compute balanced under memory, links ignored), optimal
// (exhaustive, for small instances only) and auto (replica grouping, link-aware node order,
// stages sized to compute plus transfer under memory, micro-batch count). Simulate is a discrete-event
// simulator of one training step that shares none of the planner's estimate; plans are
// judged by it. Replan decides, with hysteresis, whether a changed snapshot deserves a new
// plan. Sky64 and Geo3 generate the reference scenarios.
//
// Memory (memory.go): every stage fits its node as it is, recomputing activations, or
// recomputing and keeping the training state that does not fit on disk (offload, its I/O
// priced at the node's measured disk bandwidth), in that order of preference and as far as
// the job allows; under ZeRO each of R replicas holds 1/R of the optimizer state. With
// "auto" a plan without recomputation or offload is preferred whatever its speed. See
// docs/balancer.md and docs/memory.md.
package balancer

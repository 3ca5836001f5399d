// Package jobspec is the job specification a user submits: its YAML form, its defaults and
// its validation. It is pure data: no I/O beyond parsing the bytes it is given, no clock, no
// imports of meshnode packages, so the CLI, the node's HTTP API and the consensus FSM can all
// share it.
//
// It is also the job's vocabulary, defined once: the enumerations a spec names (Schedule,
// Sync, Codec, Strategy) with their validation, and the model's shape (Model, which
// model.Config is declared as). The balancer, the training engine, the scheduler and the CLI
// use these types directly. A field the spec may leave "auto" is settled here when the spec
// alone decides it (the outer step: AutoOuter, Spec.Outer) and by the planner when it
// needs the cluster (replicas, stages, micro-batches). Because everything imports it, it must stay a leaf: the
// standard library and yaml, nothing of ours.
package jobspec

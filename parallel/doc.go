// Package parallel is meshnode's training engine: it runs slices of the model's layer list
// as pipeline stages (Worker), under GPipe or 1F1B schedules, with data-parallel sync
// between replicas (every step, DiLoCo's outer steps with compressed pseudo-gradients
// and error feedback, or Streaming DiLoCo's outer steps per fragment of layers, staggered
// and overlapped with training), evaluates, and snapshots and restores stage state for checkpoints.
//
// One training loop, TrainLoop, drives every way of training through hooks (checkpoint,
// evaluation, progress): a whole model in one process (Trainer, `meshnode train`), every
// worker of a plan in one process (LocalRun, split runs and the engine's tests), and a
// node's worker of a distributed job (node/runner).
//
// Under a memory budget (TrainConfig.MemoryBudget) the Trainer keeps its weights,
// gradients and AdamW moments in the chunk store of package offload, with the same losses;
// so does a pipeline stage's Worker whose StagePlan has a MemoryBudget, in a plan of one
// replica (its store's schedule is the stage's 1F1B or GPipe passes).
//
// The package computes through model and kernels and talks to other nodes only through
// the Transport interface (an in-memory one here, the QUIC data plane in the node); it
// opens no sockets itself.
package parallel

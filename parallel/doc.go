// Package parallel is meshnode's training engine: it runs slices of the model's layer list
// as pipeline stages (Worker), under GPipe or 1F1B schedules, with data-parallel sync
// between replicas (every step, DiLoCo's outer steps with compressed pseudo-gradients
// and error feedback, or Streaming DiLoCo's outer steps per fragment of layers, staggered
// and overlapped with training), evaluates, and snapshots and restores stage state for checkpoints.
//
// One step path, Worker.Step, serves every way of training: a whole model in one process
// (Trainer, `meshnode train`) is a plan of one stage and one replica of the same Worker over
// a transport without peers, every worker of a plan in one process (LocalRun, split runs
// and the engine's tests) and a node's worker of a distributed job (node/runner) are the
// others. One training loop, TrainLoop, drives them through hooks (checkpoint,
// evaluation, progress).
//
// A stage's weights, gradients and AdamW moments are behind one interface
// (trainingState), chosen when the stage is built: resident in memory, or, when its
// StagePlan has a MemoryBudget (a plan of one replica), in the chunk store of package
// offload, with the same losses (its store's schedule is the stage's 1F1B or GPipe passes).
// The plan entry is the one road by which a memory budget and recomputation reach a
// worker. The store's I/O errors are returned, never panicked.
//
// How replicas synchronise (every step, ZeRO, DiLoCo, streaming) is a syncStrategy,
// one file each, chosen once when the worker is built: the step has no mode branch.
// DiLoCo's and streaming's outer steps run by quorum (quorum.go): a retired replica is
// left out, and one the control plane readmits catches up from a live member's state
// (state_copy.go) and is admitted into a later quorum (rejoin.go).
// Every contribution a replica receives is checked before it is aggregated (aggregate.go;
// in a gather of three or more, only once every member committed to its own, commit.go,
// so that none is shaped by another's)
// and, where the job scores, scored on a held-out batch from the weights every honest
// member shares (score.go; a replica cut into pipeline stages scores the whole model
// with the other stages' anchors, anchor_exchange.go, which streaming's stages exchange
// at every fragment launch, streamingSync.launchAnchors, or their mirrored weights,
// stage_mirror.go) and, where the job audits, recomputed for the members a draw from
// every contribution picks (audit.go: a replayed contribution is not its author's work);
// these checks must stay deterministic, so that every honest
// member drops the same contributions and keeps the same bits. On a transport that holds
// the node key (SigningTransport) every gathered contribution is signed by its author
// against the θ it was computed from (signature.go), and a worker keeps the signed
// contributions of its latest drop as evidence that the leader re-judges with the same
// code (evidence.go, VerifyEvidence): determinism is what makes the evidence checkable.
// Every sync mode does so (ZeRO's checked gather, streaming's fragments against every
// fragment's anchors at their launch, sync_policy.go); a pipelined replica's scored
// contributions also bind the digest of the whole model its score read (DiLoCo's anchors
// its other stages sent, every-step sync's and ZeRO's weights the stage weight mirror
// brought, bindModel), and its evidence carries the other stages' part, so the leader
// re-scores only from values the accused and a majority of the group signed (digests,
// Evidence.Others, othersBound).
//
// The package computes through model and kernels and talks to other nodes only through
// the Transport interface (an in-memory one here, the QUIC data plane in the node); it
// opens no sockets itself. A frame no honest member sends (a stage exchange of the wrong
// length, dtype or codec, a contribution of a codec its round does not use, a signed
// contribution or a ZeRO parameter chunk that does not decode, pieces that break their
// rules, a contribution other than the one its author committed to) fails the step or is dropped as before, and its sender is reported to the
// transport (MisbehaviourReporter: the data plane disconnects it); values judged bad and
// stale frames are never reported, so an honest member is never disconnected for them.
package parallel

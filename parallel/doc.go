// Package parallel is meshnode's training engine: it runs slices of the model's layer list
// as stages, steps their optimizers, evaluates, and writes and restores checkpoints.
//
// Today it trains in one process (Trainer); pipeline stages across nodes, GPipe and 1F1B
// schedules, data-parallel sync with compression and offload build on the same pieces and
// talk to the network only through an interface that the mesh implements.
//
// The package computes through model and kernels; it opens no sockets itself.
package parallel

// Package model defines the models meshnode trains — the byte-level GPT (docs/gpt.md),
// GPT-2 with its tied head and Llama (docs/models.md), with Hugging Face's names and
// layouts — each as an ordered list of layers with explicit Forward and Backward, so
// that any contiguous slice of the list is a pipeline stage; the per-layer cost model the
// balancer plans with; the datasets (the builtin:gostd corpus, text files, nanoGPT uint16
// token files) with the deterministic batch sampler and validation windows of docs/gpt.md;
// and the safetensors checkpoint format.
//
// Every layer computes through the device layer: the device.Backend of the Workspace it
// runs with (nil: the CPU backend, device/cpu), so one definition of each layer serves
// every backend. Layers must not call kernels' operations directly nor touch an
// activation's host memory except through the workspace's boundary helpers; parameters
// are host-resident kernels.Tensors (docs/engine.md, "The device layer").
//
// The package takes the model's shape from the job spec (Config is jobspec.Model) and
// does no networking.
package model

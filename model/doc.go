// Package model defines the GPT that meshnode trains (docs/gpt.md: GPT-2 architecture,
// names and layouts) as an ordered list of layers with explicit Forward and Backward, so
// that any contiguous slice of the list is a pipeline stage; the per-layer cost model the
// balancer plans with; the datasets (the builtin:gostd corpus, text files, nanoGPT uint16
// token files) with the deterministic batch sampler and validation windows of docs/gpt.md;
// and the safetensors checkpoint format.
//
// The package computes through kernels, takes the model's shape from the job spec
// (Config is jobspec.Model) and does no networking.
package model

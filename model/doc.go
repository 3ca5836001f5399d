// Package model defines the GPT that meshnode trains (GPT_SPEC.md: GPT-2 architecture,
// names and layouts) as an ordered list of layers with explicit Forward and Backward, so
// that any contiguous slice of the list is a pipeline stage; the per-layer cost model the
// balancer plans with; the datasets (the builtin:gostd corpus, text files, nanoGPT uint16
// token files) with the deterministic batch sampler and validation windows of the spec;
// and the safetensors checkpoint format.
//
// The package computes through kernels and does no networking.
package model

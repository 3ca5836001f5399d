//go:build !(linux && (amd64 || arm64)) || nonvml

package node

import "github.com/meshnode/meshnode/mesh"

// detectGPUs reports no GPU: NVML is loaded only on linux/amd64 and linux/arm64, and not
// in a build with the nonvml tag (a fully static binary, which cannot load a library).
func detectGPUs() ([]mesh.GPU, error) { return nil, nil }

// GPUDetection says how this build finds GPUs, for `meshnode version`: it does not.
func GPUDetection() string { return "none (no NVML in this build)" }

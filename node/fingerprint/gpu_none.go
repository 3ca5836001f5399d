//go:build nonvml

package fingerprint

import "github.com/meshnode/meshnode/mesh"

// detectGPUs reports no GPU: a build with the nonvml tag leaves GPU detection out.
func detectGPUs() ([]mesh.GPU, error) { return nil, nil }

// GPUDetection says how this build finds GPUs, for `meshnode version`: it does not.
func GPUDetection() string { return "none (built with -tags nonvml)" }

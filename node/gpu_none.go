//go:build !(cgo && linux)

package node

import "github.com/meshnode/meshnode/mesh"

// detectGPUs reports no GPU: NVML needs cgo on Linux.
func detectGPUs() ([]mesh.GPU, error) { return nil, nil }

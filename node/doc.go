// Package node is the meshnode daemon: its configuration, its lifecycle, device profiling
// and the local HTTP API. A Node owns a mesh.Mesh and an ordered list of services; it
// starts them in order and closes them in reverse, so that the control plane and the
// training engine can be added later as further services without touching the rest.
//
// Device profiling lives here: the GEMM rate is measured on the engine's own kernels
// (kernels.MeasureGemm at a training shape), memory and disk from the operating system and
// GPUs through NVML when cgo and a driver are present. The measured mesh.Profile is handed
// to the mesh, which carries it in heartbeats.
//
// The HTTP API listens on loopback only and has no authentication of its own: anyone who
// can reach it is on this machine. Node does not parse command lines (cmd/meshnode does)
// and never exits the process.
package node

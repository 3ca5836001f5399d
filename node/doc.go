// Package node is the meshnode daemon: its configuration, its lifecycle, device profiling,
// the wiring of mesh, control plane and training engine, and the local HTTP API. A Node
// owns a mesh.Mesh and an ordered list of services (data plane, profiler, mesh, link
// prober, consensus, engine, API); it starts them in order and closes them in reverse.
//
// The engine service (engine.go) only wires: it wakes when the FSM applies an entry
// (consensus.FSM.Changed) and on a slow supervision tick, hands the leader's view of jobs
// and members to package scheduler and commits its decisions, and hands the jobs to a
// node/runner.Runner, which runs this node's workers and checkpoints. Planning and
// supervision logic live in scheduler, the node's side of a job in node/runner; node
// implements their small dependency interfaces over the mesh, the blob service and the
// control plane.
//
// Device profiling lives here: the GEMM rate is measured on the engine's own kernels
// (kernels.MeasureGemm at a training shape), memory and disk from the operating system and
// GPUs through NVML, loaded at run time without cgo where a driver is present. The measured
// mesh.Profile is handed to the mesh, which carries it in heartbeats.
//
// The HTTP API (api.go, api_server.go) listens on loopback only, and every request passes
// api_guard.go: a Host allowlist, cross-origin protection and a bearer token kept in the
// data dir (docs/security.md); only the dashboard's static files are public. Node does not
// parse command lines (cmd/meshnode does) and never exits the process.
package node

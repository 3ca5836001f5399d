// Package fingerprint measures the device a node offers the mesh: the compute rates of
// the engine's own kernels (GEMM and whole training steps), host memory and the training
// budget, the data directory's free space and bandwidth, and the GPUs NVML reports. Each
// measurement is a Detector in a file of its own (as nomad's client/fingerprint keeps one
// fingerprinter per file); a Profiler runs them in order into one mesh.Profile.
//
// The training rates are timed in two shapes, one pass of the reference's batch
// (TrainGFLOPS) and one-sequence passes (TrainMicroGFLOPS, what the balancer prices small
// micro-batches with), alternately, each step's wall time less an emulated slowdown's
// sleeps scaled by the share of the cores a spinning probe found free around it, the
// sleeps added back unscaled (package kernels charges them from the uncontended time):
// the rate the node trains at with the machine to itself (compute.go says why neither the
// step's own CPU time nor the GEMM's share is that).
//
// The profile is a measurement, never a claim: the balancer plans with it. This package
// must not import the daemon (node), the control plane or any network package: it only
// measures this machine.
package fingerprint

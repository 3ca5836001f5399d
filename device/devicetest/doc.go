// Package devicetest is the conformance suite of the device layer: table-driven checks
// that any device.Backend must pass, in the manner of gonum's testblas. A backend's own
// test calls Run (or one of the Test functions) with an instance of it:
//
//	func TestConformance(t *testing.T) { devicetest.Run(t, cpu.New()) }
//
// A backend that needs hardware (a GPU) constructs itself first and calls t.Skip with the
// reason when it cannot, so the suite runs wherever the backend can.
// device/cuda does so ("no CUDA driver: …"), and also runs the suite on a Go
// transcription of its kernels, which needs no GPU.
//
// What it checks, for every operation and sizes that include 1, primes and non-multiples
// of any SIMD width:
//
//   - values against a straightforward float64 reference written here from the
//     specification in device.Backend's doc comments;
//   - every backward pass against central finite differences of that reference, and that
//     the passes documented as accumulating (weight gradients, LayerNorm's dx) add to what
//     the buffer held;
//   - no write outside an output: every tensor sits between guard values (NaN with a
//     payload, so a read out of bounds poisons the result too), and inputs are unchanged;
//   - determinism: the same inputs give the same bits twice, and, for a backend with a
//     SetThreads(int) method (the CPU's), with 1 thread as with 4; and a window of a GEMM's
//     C computed alone has the bits of the same window of the whole product (a
//     micro-batch's rows train exactly as they do inside a larger batch).
//
// Tolerances are those of float32 arithmetic against float64 (relative, scaled by each
// operation's reduction length), loose enough for reordered sums and tight enough that a
// wrong index or sign fails.
//
// The package is for tests: it imports testing and must not be imported by the engine.
package devicetest

// Package speedproof checks a node's claimed compute speed: a verifier (the Raft leader)
// sends a challenge, a chain of GEMMs drawn from a random seed whose FLOP count it knows,
// the prover computes it with the engine's own kernels and commits to the hash of every
// row of the result; the verifier recomputes a few rows it picks after the answer arrived
// and compares their hashes bit for bit. The round trip bounds what the prover proved: it
// cannot answer before it has computed, so FLOPs over round trip is a speed it has at
// least, whatever it claims. A wrong row is a lie.
//
// The package knows nothing of membership, Raft or the planner: the node decides whom to
// challenge, when, what the result is worth and who may challenge it (ProverConfig.Allow).
// It must not let a challenge cost a prover more than MaxFLOPs, nor more than one
// challenge per MinInterval, nor allocate what a message claims before checking it.
package speedproof

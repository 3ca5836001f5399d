package balancer

import "math"

// Micro-batch efficiency: a node's training rate depends on how many tokens one pass
// computes at once. Small micro-batches run small GEMMs whose thread fan-out, per-call
// overhead and short inner loops cost more per FLOP, and the engine runs every op once per
// micro-batch. Node.GFLOPS is the node's rate on micro-batches of LargeMicroTokens tokens
// (the profile's reference: 8 sequences of 128 tokens in one pass); MicroEfficiency is its
// rate on micro-batches of SmallMicroTokens (one such sequence a pass) over that. A stage's
// compute on micro-batches of t tokens is priced at GFLOPS × efficiency(t):
//
//	efficiency(t) = 1                                               t ≥ LargeMicroTokens
//	              = e                                               t ≤ SmallMicroTokens
//	              = 1 − (1 − e) · log(Large/t) / log(Large/Small)   between
//
// On the development machine (AMD EPYC, 2 vCPU, idle) the reference trained at 143–163
// GFLOP/s in one pass of 8 sequences, 124 in passes of 2, 140 in passes of 4 and
// 110–117 in passes of one (e ≈ 0.73–0.77), and the default model's stage of one
// sequence per micro-batch, the quick start's pipeline, computed 1.34× what the
// one-pass rate priced. Without a measured e (older profiles, GPUs) the rate is the same
// at every size, as before.

const (
	// SmallMicroTokens and LargeMicroTokens are the micro-batch sizes, in tokens, of the
	// two training rates a profile measures (records.Profile.TrainMicroGFLOPS and
	// TrainGFLOPS).
	SmallMicroTokens = 128
	LargeMicroTokens = 1024
)

// microSlowdown is how many times longer than at its large-micro-batch rate a node of
// micro-batch efficiency eff computes a micro-batch of tokens tokens: 1/efficiency(tokens).
func microSlowdown(eff, tokens float64) float64 {
	if !(eff < 1) || !(eff > 0) || tokens >= LargeMicroTokens {
		return 1
	}
	if tokens <= SmallMicroTokens {
		return 1 / eff
	}
	f := math.Log(LargeMicroTokens/tokens) / math.Log(LargeMicroTokens/SmallMicroTokens)
	return 1 / (1 - (1-eff)*f)
}

// microScale is microSlowdown for node nd on micro-batches of seqs sequences.
func (in *instance) microScale(nd int, seqs float64) float64 {
	return microSlowdown(in.microEff[nd], seqs*in.tokens)
}

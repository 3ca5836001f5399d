package main

// fmaPeak is fma_peak_amd64.s: register-only FMA loops that measure the machine's
// fp32 peak (meshnode bench). Each iteration issues chains independent FMAs into as many
// accumulators, enough to cover the FMA latency on every x86 core (4–5 cycles, 2 pipes).
func fmaPeak() []byte {
	g := &gen{}
	header(g, "peak")
	peakLoop(g, "fmaPeakAVX2", "Y", 12)
	peakLoop(g, "fmaPeakAVX512", "Z", 24)
	return g.Bytes()
}

func peakLoop(g *gen, name, reg string, chains int) {
	g.f("")
	g.f("// func %s(iters int)", name)
	g.f("TEXT ·%s(SB), NOSPLIT, $0-8", name)
	g.f("\tMOVQ iters+0(FP), CX")
	for r := 0; r < chains+2; r++ {
		g.f("\tVXORPS %s%d, %s%d, %s%d", reg, r, reg, r, reg, r)
	}
	g.f("%sloop:", name)
	for r := 0; r < chains; r++ {
		g.f("\tVFMADD231PS %s%d, %s%d, %s%d", reg, chains, reg, chains+1, reg, r)
	}
	g.f("\tDECQ CX")
	g.f("\tJNZ %sloop", name)
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

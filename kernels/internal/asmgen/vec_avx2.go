package main

import "fmt"

// The AVX2+FMA elementwise kernels (vec_avx2_amd64.s): GELU forward and backward and the
// shifted exponential of softmax. They do, operation for operation, what the AVX-512
// kernels of vec_amd64.s do (so both paths give the same bits), on two ymm registers of
// 8 lanes per step of 16 elements: the constants come from a table of pre-broadcast
// 8-lane rows (AVX2 has no embedded broadcast and only 16 vector registers), and 2ⁿ is
// built from exponent bits instead of VSCALEFPS.

// Row offsets, in bytes, of the GELU constant table (geluConsts8, see vec_amd64.go).
const (
	gC = 32 * iota
	gA
	gMax
	gMin
	gA13
	gA11
	gA9
	gA7
	gA5
	gA3
	gA1
	gB6
	gB4
	gB2
	gB0
	gHalf
	gOne
	g3AC
)

// geluStream names the ymm registers of one 8-lane stream of a GELU kernel.
type geluStream struct{ x, x2, u, u2, p, q, t int }

var geluStreams = [2]geluStream{{0, 1, 2, 3, 4, 5, 6}, {8, 9, 10, 11, 12, 13, 14}}

// geluTanh emits, for both streams, x² and t = tanh(clamp(c·(x + a·x³))) from x, with
// the table at R8: the instructions of vec_amd64.s's GELU_TANH, interleaved.
func geluTanh(g *gen) {
	both := func(format string, regs func(s geluStream) []any) {
		for _, s := range geluStreams {
			g.f("\t"+format, regs(s)...)
		}
	}
	both("VMULPS Y%d, Y%d, Y%d", func(s geluStream) []any { return []any{s.x, s.x, s.x2} })
	both("VMULPS %d(R8), Y%d, Y%d", func(s geluStream) []any { return []any{gA, s.x2, s.u} })
	both("VFMADD213PS Y%d, Y%d, Y%d", func(s geluStream) []any { return []any{s.x, s.x, s.u} })
	both("VMULPS %d(R8), Y%d, Y%d", func(s geluStream) []any { return []any{gC, s.u, s.u} })
	both("VMINPS %d(R8), Y%d, Y%d", func(s geluStream) []any { return []any{gMax, s.u, s.u} })
	both("VMAXPS %d(R8), Y%d, Y%d", func(s geluStream) []any { return []any{gMin, s.u, s.u} })
	both("VMULPS Y%d, Y%d, Y%d", func(s geluStream) []any { return []any{s.u, s.u, s.u2} })
	both("VMOVUPS %d(R8), Y%d", func(s geluStream) []any { return []any{gA13, s.p} })
	for _, off := range []int{gA11, gA9, gA7, gA5, gA3, gA1} {
		both("VFMADD213PS %d(R8), Y%d, Y%d", func(s geluStream) []any { return []any{off, s.u2, s.p} })
	}
	both("VMULPS Y%d, Y%d, Y%d", func(s geluStream) []any { return []any{s.u, s.p, s.p} })
	both("VMOVUPS %d(R8), Y%d", func(s geluStream) []any { return []any{gB6, s.q} })
	for _, off := range []int{gB4, gB2, gB0} {
		both("VFMADD213PS %d(R8), Y%d, Y%d", func(s geluStream) []any { return []any{off, s.u2, s.q} })
	}
	both("VDIVPS Y%d, Y%d, Y%d", func(s geluStream) []any { return []any{s.q, s.p, s.t} })
}

// vecLoop emits the loop frame shared by the kernels: AX counts elements 0, 16, … < CX.
func vecLoop(g *gen, label string, body func()) {
	g.f("\tXORQ AX, AX")
	g.f("")
	g.f("%sloop:", label)
	g.f("\tCMPQ AX, CX")
	g.f("\tJGE %sdone", label)
	body()
	g.f("\tADDQ $16, AX")
	g.f("\tJMP %sloop", label)
	g.f("")
	g.f("%sdone:", label)
}

// off is the byte offset of stream i's 8 lanes within a 16-element step.
func off(i int) string { return fmt.Sprintf("%d", 32*i) }

func geluFwdAVX2(g *gen) {
	g.f("")
	g.f("// func geluFwdAVX2(y, x *float32, n int, c *[18][8]float32)")
	g.f("TEXT ·geluFwdAVX2(SB), NOSPLIT, $0-32")
	g.f("\tMOVQ y+0(FP), DI")
	g.f("\tMOVQ x+8(FP), SI")
	g.f("\tMOVQ n+16(FP), CX")
	g.f("\tMOVQ c+24(FP), R8")
	vecLoop(g, "gf", func() {
		for i, s := range geluStreams {
			g.f("\tVMOVUPS %s(SI)(AX*4), Y%d", off(i), s.x)
		}
		geluTanh(g)
		for i, s := range geluStreams {
			g.f("\tVADDPS %d(R8), Y%d, Y%d", gOne, s.t, s.t)   // 1 + t
			g.f("\tVMULPS %d(R8), Y%d, Y%d", gHalf, s.x, s.x2) // 0.5·x
			g.f("\tVMULPS Y%d, Y%d, Y%d", s.t, s.x2, s.x2)     // 0.5·x·(1 + t)
			g.f("\tVMOVUPS Y%d, %s(DI)(AX*4)", s.x2, off(i))
		}
	})
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

func geluBwdAVX2(g *gen) {
	g.f("")
	g.f("// func geluBwdAVX2(dx, x, dy *float32, n int, c *[18][8]float32)")
	g.f("TEXT ·geluBwdAVX2(SB), NOSPLIT, $0-40")
	g.f("\tMOVQ dx+0(FP), DI")
	g.f("\tMOVQ x+8(FP), SI")
	g.f("\tMOVQ dy+16(FP), DX")
	g.f("\tMOVQ n+24(FP), CX")
	g.f("\tMOVQ c+32(FP), R8")
	vecLoop(g, "gb", func() {
		for i, s := range geluStreams {
			g.f("\tVMOVUPS %s(SI)(AX*4), Y%d", off(i), s.x)
		}
		geluTanh(g)
		for i, s := range geluStreams {
			// Registers freed by the tanh: u ← 0.5·(1+t), u2 ← 1−t², p ← c·(1+3a·x²), q ← gelu'.
			g.f("\tVADDPS %d(R8), Y%d, Y%d", gOne, s.t, s.u)
			g.f("\tVMULPS %d(R8), Y%d, Y%d", gHalf, s.u, s.u)
			g.f("\tVMOVAPS Y%d, Y%d", s.t, s.u2)
			g.f("\tVFNMADD213PS %d(R8), Y%d, Y%d", gOne, s.t, s.u2)
			g.f("\tVMOVUPS %d(R8), Y%d", g3AC, s.p)
			g.f("\tVFMADD213PS %d(R8), Y%d, Y%d", gC, s.x2, s.p)
			g.f("\tVMULPS %d(R8), Y%d, Y%d", gHalf, s.x, s.q)
			g.f("\tVMULPS Y%d, Y%d, Y%d", s.u2, s.q, s.q)
			g.f("\tVFMADD213PS Y%d, Y%d, Y%d", s.u, s.p, s.q)
			g.f("\tVMULPS %s(DX)(AX*4), Y%d, Y%d", off(i), s.q, s.q)
			g.f("\tVMOVUPS Y%d, %s(DI)(AX*4)", s.q, off(i))
		}
	})
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

// Row offsets of the exp constant table (expConsts8, see vec_amd64.go).
const (
	eLog2e = 32 * iota
	eLn2Hi
	eLn2Lo
	eMin
	eMax
	eC7
	eC6
	eC5
	eC4
	eC3
	eC2
	eOne
	_
	eBias // int32 127, the exponent bias
)

// expStream names the ymm registers of one 8-lane stream of expShiftAVX2.
type expStream struct{ v, n, r, p, k1, k2 int }

var expStreams = [2]expStream{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}}

// expShiftAVX2: Y12/Y13 hold the lane sums of lanes 0–7 and 8–15, Y14 the shift, Y15
// the scale. 2ⁿ (n in [-126, 128]) is applied as two exact-power factors 2^(n>>1) and
// 2^(n−n>>1), so p·2ⁿ is rounded once, as VSCALEFPS rounds it.
func expShiftAVX2(g *gen) {
	g.f("")
	g.f("// func expShiftAVX2(dst, src *float32, n int, shift, scale float32, c *[14][8]float32, acc *[16]float32)")
	g.f("TEXT ·expShiftAVX2(SB), NOSPLIT, $0-48")
	g.f("\tMOVQ dst+0(FP), DI")
	g.f("\tMOVQ src+8(FP), SI")
	g.f("\tMOVQ n+16(FP), CX")
	g.f("\tVBROADCASTSS shift+24(FP), Y14")
	g.f("\tVBROADCASTSS scale+28(FP), Y15")
	g.f("\tMOVQ c+32(FP), R8")
	g.f("\tVXORPS Y12, Y12, Y12")
	g.f("\tVXORPS Y13, Y13, Y13")
	vecLoop(g, "ex", func() {
		each := func(format string, regs func(s expStream) []any) {
			for _, s := range expStreams {
				g.f("\t"+format, regs(s)...)
			}
		}
		for i, s := range expStreams {
			g.f("\tVMOVUPS %s(SI)(AX*4), Y%d", off(i), s.v)
		}
		each("VSUBPS Y14, Y%d, Y%d", func(s expStream) []any { return []any{s.v, s.v} })
		each("VMAXPS %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eMin, s.v, s.v} })
		each("VMINPS %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eMax, s.v, s.v} })
		each("VMULPS %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eLog2e, s.v, s.n} })
		each("VROUNDPS $0, Y%d, Y%d", func(s expStream) []any { return []any{s.n, s.n} })
		each("VMOVAPS Y%d, Y%d", func(s expStream) []any { return []any{s.v, s.r} })
		each("VFNMADD231PS %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eLn2Hi, s.n, s.r} })
		each("VFNMADD231PS %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eLn2Lo, s.n, s.r} })
		each("VMOVUPS %d(R8), Y%d", func(s expStream) []any { return []any{eC7, s.p} })
		for _, o := range []int{eC6, eC5, eC4, eC3, eC2, eOne, eOne} {
			each("VFMADD213PS %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{o, s.r, s.p} })
		}
		each("VCVTPS2DQ Y%d, Y%d", func(s expStream) []any { return []any{s.n, s.n} })
		each("VPSRAD $1, Y%d, Y%d", func(s expStream) []any { return []any{s.n, s.k1} })
		each("VPSUBD Y%d, Y%d, Y%d", func(s expStream) []any { return []any{s.k1, s.n, s.k2} })
		each("VPADDD %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eBias, s.k1, s.k1} })
		each("VPADDD %d(R8), Y%d, Y%d", func(s expStream) []any { return []any{eBias, s.k2, s.k2} })
		each("VPSLLD $23, Y%d, Y%d", func(s expStream) []any { return []any{s.k1, s.k1} })
		each("VPSLLD $23, Y%d, Y%d", func(s expStream) []any { return []any{s.k2, s.k2} })
		each("VMULPS Y%d, Y%d, Y%d", func(s expStream) []any { return []any{s.k1, s.p, s.p} })
		each("VMULPS Y%d, Y%d, Y%d", func(s expStream) []any { return []any{s.k2, s.p, s.p} })
		g.f("\tVADDPS Y%d, Y12, Y12", expStreams[0].p)
		g.f("\tVADDPS Y%d, Y13, Y13", expStreams[1].p)
		for i, s := range expStreams {
			g.f("\tVMULPS Y15, Y%d, Y%d", s.p, s.p)
			g.f("\tVMOVUPS Y%d, %s(DI)(AX*4)", s.p, off(i))
		}
	})
	g.f("\tMOVQ acc+40(FP), R9")
	g.f("\tVMOVUPS Y12, (R9)")
	g.f("\tVMOVUPS Y13, 32(R9)")
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

// vecAVX2 is the whole of vec_avx2_amd64.s.
func vecAVX2() []byte {
	g := &gen{}
	header(g, "vec")
	g.f("// AVX2+FMA elementwise kernels, 16 elements (two ymm) per step; n is a multiple of 16 and")
	g.f("// the Go wrappers in vec_amd64.go run the tails. Generated by kernels/internal/asmgen.")
	geluFwdAVX2(g)
	geluBwdAVX2(g)
	expShiftAVX2(g)
	addToAVX2(g)
	return g.Bytes()
}

// addToAVX2 adds src to dst elementwise, n a multiple of 8: 32 elements a pass while
// enough remain, then 8. Each element is one IEEE add, so the result is that of the Go loop.
func addToAVX2(g *gen) {
	g.f("")
	g.f("// func addToAVX2(dst, src *float32, n int)")
	g.f("TEXT ·addToAVX2(SB), NOSPLIT, $0-24")
	g.f("\tMOVQ dst+0(FP), DI")
	g.f("\tMOVQ src+8(FP), SI")
	g.f("\tMOVQ n+16(FP), CX")
	g.f("\tXORQ AX, AX")
	g.f("\tMOVQ CX, DX")
	g.f("\tANDQ $-32, DX")
	g.f("")
	g.f("add32:")
	g.f("\tCMPQ AX, DX")
	g.f("\tJGE add8")
	for i := 0; i < 4; i++ {
		g.f("\tVMOVUPS %d(DI)(AX*4), Y%d", 32*i, i)
	}
	for i := 0; i < 4; i++ {
		g.f("\tVADDPS %d(SI)(AX*4), Y%d, Y%d", 32*i, i, i)
	}
	for i := 0; i < 4; i++ {
		g.f("\tVMOVUPS Y%d, %d(DI)(AX*4)", i, 32*i)
	}
	g.f("\tADDQ $32, AX")
	g.f("\tJMP add32")
	g.f("")
	g.f("add8:")
	g.f("\tCMPQ AX, CX")
	g.f("\tJGE adddone")
	g.f("\tVMOVUPS (DI)(AX*4), Y0")
	g.f("\tVADDPS (SI)(AX*4), Y0, Y0")
	g.f("\tVMOVUPS Y0, (DI)(AX*4)")
	g.f("\tADDQ $8, AX")
	g.f("\tJMP add8")
	g.f("")
	g.f("adddone:")
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

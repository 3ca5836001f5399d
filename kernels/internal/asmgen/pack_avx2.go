package main

// packAVX2 is the AVX2 packing of op(B) into the 16-column panels of the 6×16 kernel
// (appended to gemm_avx2_amd64.s).
func packAVX2() []byte {
	g := &gen{}
	packB16(g)
	packBT16(g)
	return g.Bytes()
}

// packB16 packs one panel of an untransposed op(B) = B: for p < kc,
// dst[p·16 : p·16+16] = b[p·ldb : p·ldb+16], two k steps per iteration.
func packB16(g *gen) {
	g.f("")
	g.f("// func gemmPackB16(kc int, b *float32, ldb int, dst *float32)")
	g.f("//")
	g.f("// Requires kc ≥ 1 and rows p < kc of b to hold 16 values each.")
	g.f("TEXT ·gemmPackB16(SB), NOSPLIT, $0-32")
	g.f("\tMOVQ kc+0(FP), CX")
	g.f("\tMOVQ b+8(FP), SI")
	g.f("\tMOVQ ldb+16(FP), R9")
	g.f("\tSHLQ $2, R9")
	g.f("\tMOVQ dst+24(FP), DI")
	g.f("\tCMPQ CX, $2")
	g.f("\tJLT b16tail")
	g.f("")
	g.f("b16loop:")
	g.f("\tVMOVUPS (SI), Y0")
	g.f("\tVMOVUPS 32(SI), Y1")
	g.f("\tVMOVUPS (SI)(R9*1), Y2")
	g.f("\tVMOVUPS 32(SI)(R9*1), Y3")
	g.f("\tVMOVUPS Y0, (DI)")
	g.f("\tVMOVUPS Y1, 32(DI)")
	g.f("\tVMOVUPS Y2, 64(DI)")
	g.f("\tVMOVUPS Y3, 96(DI)")
	g.f("\tLEAQ (SI)(R9*2), SI")
	g.f("\tADDQ $128, DI")
	g.f("\tSUBQ $2, CX")
	g.f("\tCMPQ CX, $2")
	g.f("\tJGE b16loop")
	g.f("")
	g.f("b16tail:")
	g.f("\tTESTQ CX, CX")
	g.f("\tJZ b16done")
	g.f("\tVMOVUPS (SI), Y0")
	g.f("\tVMOVUPS 32(SI), Y1")
	g.f("\tVMOVUPS Y0, (DI)")
	g.f("\tVMOVUPS Y1, 32(DI)")
	g.f("")
	g.f("b16done:")
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

// packBT16 packs one panel of a transposed op(B) = Bᵀ, kc a multiple of 8: for p < kc and
// s < 16, dst[p·16+s] = b[s·ldb+p]. Each 8×8 block (rows s = 8h…8h+7, k steps p0…p0+7) is
// loaded into Y0–Y7 and transposed in registers (unpack, shuffle, 128-bit permute).
func packBT16(g *gen) {
	g.f("")
	g.f("// func gemmPackBT16(kc int, b *float32, ldb int, dst *float32)")
	g.f("//")
	g.f("// Requires kc a positive multiple of 8 and rows s < 16 of b to hold kc values each.")
	g.f("TEXT ·gemmPackBT16(SB), NOSPLIT, $0-32")
	g.f("\tMOVQ kc+0(FP), CX")
	g.f("\tMOVQ b+8(FP), SI")
	g.f("\tMOVQ ldb+16(FP), R9")
	g.f("\tSHLQ $2, R9")
	g.f("\tLEAQ (R9)(R9*2), R10")
	g.f("\tMOVQ dst+24(FP), DI")
	g.f("")
	g.f("bt16loop:")
	for h := 0; h < 2; h++ {
		g.f("\tMOVQ SI, R8")
		if h == 1 {
			g.f("\tLEAQ (R8)(R9*8), R8")
		}
		g.f("\tVMOVUPS (R8), Y0")
		g.f("\tVMOVUPS (R8)(R9*1), Y1")
		g.f("\tVMOVUPS (R8)(R9*2), Y2")
		g.f("\tVMOVUPS (R8)(R10*1), Y3")
		g.f("\tLEAQ (R8)(R9*4), R8")
		g.f("\tVMOVUPS (R8), Y4")
		g.f("\tVMOVUPS (R8)(R9*1), Y5")
		g.f("\tVMOVUPS (R8)(R9*2), Y6")
		g.f("\tVMOVUPS (R8)(R10*1), Y7")
		transpose8(g)
		// Y8+j holds k step p0+j of columns 8h…8h+7.
		for j := 0; j < 8; j++ {
			g.f("\tVMOVUPS Y%d, %d(DI)", 8+j, 64*j+32*h)
		}
	}
	g.f("\tADDQ $32, SI")
	g.f("\tADDQ $512, DI")
	g.f("\tSUBQ $8, CX")
	g.f("\tJG bt16loop")
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}

// transpose8 transposes the 8×8 block in Y0–Y7 (row r in Yr) into Y8–Y15 (column j in
// Y8+j), using Y0–Y15.
func transpose8(g *gen) {
	for i := 0; i < 4; i++ {
		g.f("\tVUNPCKLPS Y%d, Y%d, Y%d", 2*i+1, 2*i, 8+2*i)
		g.f("\tVUNPCKHPS Y%d, Y%d, Y%d", 2*i+1, 2*i, 9+2*i)
	}
	for i := 0; i < 2; i++ {
		t := 8 + 4*i
		g.f("\tVSHUFPS $0x44, Y%d, Y%d, Y%d", t+2, t, 4*i)
		g.f("\tVSHUFPS $0xEE, Y%d, Y%d, Y%d", t+2, t, 4*i+1)
		g.f("\tVSHUFPS $0x44, Y%d, Y%d, Y%d", t+3, t+1, 4*i+2)
		g.f("\tVSHUFPS $0xEE, Y%d, Y%d, Y%d", t+3, t+1, 4*i+3)
	}
	for j := 0; j < 4; j++ {
		g.f("\tVPERM2F128 $0x20, Y%d, Y%d, Y%d", 4+j, j, 8+j)
		g.f("\tVPERM2F128 $0x31, Y%d, Y%d, Y%d", 4+j, j, 12+j)
	}
}

//go:build amd64 && !noasm

#include "textflag.h"

// Vectorised elementwise kernels (AVX-512, 16 lanes). Each processes n elements, n a
// multiple of 16; the Go wrappers in vec_amd64.go run the tails. The math is that of
// geluForwardGo, geluBackwardGo and expShiftGo: Eigen's rational tanh, and exp by
// Cody–Waite range reduction, a degree-7 polynomial and VSCALEFPS.

// Broadcast the 18 GELU constants (see geluConsts) into Z14–Z31.
#define GELU_CONSTS(R) \
	VBROADCASTSS 0(R), Z14  \
	VBROADCASTSS 4(R), Z15  \
	VBROADCASTSS 8(R), Z16  \
	VBROADCASTSS 12(R), Z17 \
	VBROADCASTSS 16(R), Z18 \
	VBROADCASTSS 20(R), Z19 \
	VBROADCASTSS 24(R), Z20 \
	VBROADCASTSS 28(R), Z21 \
	VBROADCASTSS 32(R), Z22 \
	VBROADCASTSS 36(R), Z23 \
	VBROADCASTSS 40(R), Z24 \
	VBROADCASTSS 44(R), Z25 \
	VBROADCASTSS 48(R), Z26 \
	VBROADCASTSS 52(R), Z27 \
	VBROADCASTSS 56(R), Z28 \
	VBROADCASTSS 60(R), Z29 \
	VBROADCASTSS 64(R), Z30 \
	VBROADCASTSS 68(R), Z31

// From x in Z0: Z1 = x², Z2 = u = clamp(c·(x + a·x³)), Z6 = tanh(u).
#define GELU_TANH \
	VMULPS      Z0, Z0, Z1   \
	VMULPS      Z15, Z1, Z2  \
	VFMADD213PS Z0, Z0, Z2   \
	VMULPS      Z14, Z2, Z2  \
	VMINPS      Z16, Z2, Z2  \
	VMAXPS      Z17, Z2, Z2  \
	VMULPS      Z2, Z2, Z3   \
	VMOVAPS     Z18, Z4      \
	VFMADD213PS Z19, Z3, Z4  \
	VFMADD213PS Z20, Z3, Z4  \
	VFMADD213PS Z21, Z3, Z4  \
	VFMADD213PS Z22, Z3, Z4  \
	VFMADD213PS Z23, Z3, Z4  \
	VFMADD213PS Z24, Z3, Z4  \
	VMULPS      Z2, Z4, Z4   \
	VMOVAPS     Z25, Z5      \
	VFMADD213PS Z26, Z3, Z5  \
	VFMADD213PS Z27, Z3, Z5  \
	VFMADD213PS Z28, Z3, Z5  \
	VDIVPS      Z5, Z4, Z6

// func geluFwdAVX512(y, x *float32, n int, c *[18]float32)
TEXT ·geluFwdAVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R8
	GELU_CONSTS(R8)
	XORQ AX, AX

gfloop:
	CMPQ    AX, CX
	JGE     gfdone
	VMOVUPS (SI)(AX*4), Z0
	GELU_TANH
	VADDPS  Z30, Z6, Z6
	VMULPS  Z29, Z0, Z7
	VMULPS  Z6, Z7, Z7
	VMOVUPS Z7, (DI)(AX*4)
	ADDQ    $16, AX
	JMP     gfloop

gfdone:
	VZEROUPPER
	RET

// func geluBwdAVX512(dx, x, dy *float32, n int, c *[18]float32)
TEXT ·geluBwdAVX512(SB), NOSPLIT, $0-40
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), R8
	GELU_CONSTS(R8)
	XORQ AX, AX

gbloop:
	CMPQ         AX, CX
	JGE          gbdone
	VMOVUPS      (SI)(AX*4), Z0
	GELU_TANH
	VADDPS       Z30, Z6, Z9        // 1 + t
	VMULPS       Z29, Z9, Z9        // 0.5·(1 + t)
	VMOVAPS      Z6, Z10
	VFNMADD213PS Z30, Z6, Z10       // 1 − t²
	VMOVAPS      Z1, Z11
	VFMADD213PS  Z14, Z31, Z11      // c·(1 + 3a·x²) = 3ac·x² + c
	VMULPS       Z29, Z0, Z12       // 0.5·x
	VMULPS       Z10, Z12, Z12
	VFMADD213PS  Z9, Z11, Z12       // gelu'(x)
	VMULPS       (DX)(AX*4), Z12, Z12
	VMOVUPS      Z12, (DI)(AX*4)
	ADDQ         $16, AX
	JMP          gbloop

gbdone:
	VZEROUPPER
	RET

// func expShiftAVX512(dst, src *float32, n int, shift, scale float32, c *[13]float32, acc *[16]float32)
TEXT ·expShiftAVX512(SB), NOSPLIT, $0-48
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS shift+24(FP), Z20
	VBROADCASTSS scale+28(FP), Z21
	MOVQ         c+32(FP), R8
	VBROADCASTSS 0(R8), Z22         // log2(e)
	VBROADCASTSS 4(R8), Z23         // ln2 high
	VBROADCASTSS 8(R8), Z24         // ln2 low
	VBROADCASTSS 12(R8), Z25        // lowest argument
	VBROADCASTSS 16(R8), Z26        // highest argument
	VBROADCASTSS 20(R8), Z27        // 1/7!
	VBROADCASTSS 24(R8), Z28        // 1/6!
	VBROADCASTSS 28(R8), Z29        // 1/5!
	VBROADCASTSS 32(R8), Z30        // 1/4!
	VBROADCASTSS 36(R8), Z31        // 1/3!
	VBROADCASTSS 40(R8), Z19        // 1/2
	VBROADCASTSS 44(R8), Z18        // 1
	VXORPS       Z16, Z16, Z16      // lane sums
	XORQ         AX, AX

exloop:
	CMPQ         AX, CX
	JGE          exdone
	VMOVUPS      (SI)(AX*4), Z0
	VSUBPS       Z20, Z0, Z0
	VMAXPS       Z25, Z0, Z0
	VMINPS       Z26, Z0, Z0
	VMULPS       Z22, Z0, Z1
	VRNDSCALEPS  $0, Z1, Z1         // n = round(v·log2 e)
	VMOVAPS      Z0, Z2
	VFNMADD231PS Z23, Z1, Z2        // r = v − n·ln2 (two parts)
	VFNMADD231PS Z24, Z1, Z2
	VMOVAPS      Z27, Z3
	VFMADD213PS  Z28, Z2, Z3
	VFMADD213PS  Z29, Z2, Z3
	VFMADD213PS  Z30, Z2, Z3
	VFMADD213PS  Z31, Z2, Z3
	VFMADD213PS  Z19, Z2, Z3
	VFMADD213PS  Z18, Z2, Z3
	VFMADD213PS  Z18, Z2, Z3
	VSCALEFPS    Z1, Z3, Z3         // ·2ⁿ
	VADDPS       Z3, Z16, Z16
	VMULPS       Z21, Z3, Z3
	VMOVUPS      Z3, (DI)(AX*4)
	ADDQ         $16, AX
	JMP          exloop

exdone:
	MOVQ    acc+40(FP), R9
	VMOVUPS Z16, (R9)
	VZEROUPPER
	RET

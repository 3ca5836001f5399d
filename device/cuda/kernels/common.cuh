// common.cuh: what the kernels need from CUDA, written so that the same sources compile
// with nvcc and with clang without the CUDA SDK (-nocudainc -nocudalib). Transcendentals
// are PTX instructions through inline asm, so both compilers emit the same math.
#pragma once

#if defined(MESHNODE_EMULATE)
// The host emulation of device/cuda/testdata/emukernels.cc: each CUDA thread is a host
// thread whose indices it sets; barriers and warp exchanges are its functions.
#include "emulate.h"
#elif defined(__NVCC__)
#define TID_X threadIdx.x
#define TID_Y threadIdx.y
#define BID_X blockIdx.x
#define BID_Y blockIdx.y
#define BDIM_X blockDim.x
#define GDIM_X gridDim.x
#define SYNC() __syncthreads()
#define BFLY(v, s) __shfl_xor_sync(0xffffffffu, (v), (s))
#define FMA(a, b, c) fmaf((a), (b), (c))
#else
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define TID_X __nvvm_read_ptx_sreg_tid_x()
#define TID_Y __nvvm_read_ptx_sreg_tid_y()
#define BID_X __nvvm_read_ptx_sreg_ctaid_x()
#define BID_Y __nvvm_read_ptx_sreg_ctaid_y()
#define BDIM_X __nvvm_read_ptx_sreg_ntid_x()
#define GDIM_X __nvvm_read_ptx_sreg_nctaid_x()
#define SYNC() __syncthreads()
#define BFLY(v, s) __nvvm_shfl_sync_bfly_f32(0xffffffffu, (v), (s), 0x1f)
#define FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#endif

typedef unsigned short bf16_t;

#if defined(MESHNODE_EMULATE)
static inline float ex2(float x) { return emu_exp2f(x); }
static inline float lg2(float x) { return emu_log2f(x); }
static inline float sqrt_rn(float x) { return emu_sqrtf(x); }
#else
// ex2 is 2^x (ex2.approx.f32: relative error below 2^-22).
static __device__ inline float ex2(float x) {
	float y;
	asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

// lg2 is log2(x) (lg2.approx.f32).
static __device__ inline float lg2(float x) {
	float y;
	asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

// sqrt_rn is the correctly rounded square root.
static __device__ inline float sqrt_rn(float x) {
	float y;
	asm("sqrt.rn.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}
#endif

static __device__ inline float expf_(float x) { return ex2(x * 1.4426950408889634f); }
static __device__ inline float logf_(float x) { return lg2(x) * 0.6931471805599453f; }

// tanhf_ is tanh through exp: sign(u)·(1 − 2/(e^{2|u|} + 1)).
static __device__ inline float tanhf_(float u) {
	float a = u < 0 ? -u : u;
	float t = 1.0f - 2.0f / (expf_(2.0f * a) + 1.0f);
	return u < 0 ? -t : t;
}

static __device__ inline float fmaxf_(float a, float b) { return a > b ? a : b; }

// warp_sum is the sum of v over the 32 lanes of a warp, the same bits on every lane (a
// butterfly: each level adds a pair, and a + b = b + a exactly).
static __device__ inline float warp_sum(float v) {
	for (int s = 16; s > 0; s >>= 1) v += BFLY(v, s);
	return v;
}

// block_sum is the sum of v over a block of a power-of-two number of threads, in a fixed
// tree order; sh holds blockDim.x floats. Every thread gets the result.
static __device__ inline float block_sum(float v, float *sh) {
	unsigned t = TID_X;
	sh[t] = v;
	SYNC();
	for (unsigned s = BDIM_X / 2; s > 0; s >>= 1) {
		if (t < s) sh[t] += sh[t + s];
		SYNC();
	}
	float r = sh[0];
	SYNC();
	return r;
}

// block_max is block_sum's maximum.
static __device__ inline float block_max(float v, float *sh) {
	unsigned t = TID_X;
	sh[t] = v;
	SYNC();
	for (unsigned s = BDIM_X / 2; s > 0; s >>= 1) {
		if (t < s) sh[t] = fmaxf_(sh[t], sh[t + s]);
		SYNC();
	}
	float r = sh[0];
	SYNC();
	return r;
}

// gid is the thread's index in a one-dimensional grid.
static __device__ inline long gid() { return (long)BID_X * BDIM_X + TID_X; }

// emulate.h: what kernels/common.cuh needs to compile the kernels as host C++ (with
// -DMESHNODE_EMULATE), for emukernels.cc: each CUDA thread runs as a coroutine whose
// block and thread indices the scheduler sets; __syncthreads is a barrier of the block's
// threads and a warp shuffle an exchange among the warp's 32 threads.
#pragma once
#include <math.h>

#define __global__
#define __device__
#define __shared__ static // blocks run one at a time, so one copy serves the block

extern thread_local unsigned emu_tid_x, emu_tid_y, emu_bid_x, emu_bid_y, emu_bdim_x, emu_gdim_x;
#define TID_X emu_tid_x
#define TID_Y emu_tid_y
#define BID_X emu_bid_x
#define BID_Y emu_bid_y
#define BDIM_X emu_bdim_x
#define GDIM_X emu_gdim_x

void emu_syncthreads(void);
float emu_bfly(float v, int lane_mask);
#define SYNC() emu_syncthreads()
#define BFLY(v, s) emu_bfly((v), (s))
#define FMA(a, b, c) fmaf((a), (b), (c))

static inline float emu_exp2f(float x) { return exp2f(x); }
static inline float emu_log2f(float x) { return log2f(x); }
static inline float emu_sqrtf(float x) { return sqrtf(x); }

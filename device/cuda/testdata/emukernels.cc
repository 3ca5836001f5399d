// emukernels.cc: the kernels of device/cuda/kernels, compiled from their CUDA C source as
// host C++ and run by the fake driver's cuLaunchKernel (fakecuda.c): every block in turn,
// its threads as coroutines where the kernel synchronises (barriers, warp shuffles), in a
// loop where it does not. Each kernel's arguments are read from cuLaunchKernel's
// kernelParams with the types of the kernel's own C signature. It is slow and exact
// enough to run the conformance suite on the real kernel source without a GPU; it cannot
// show what the CUDA compiler, the PTX JIT or the hardware do differently.
#include <ucontext.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <utility>

#include "../kernels/attention.cu"
#include "../kernels/crossentropy.cu"
#include "../kernels/elementwise.cu"
#include "../kernels/embedding.cu"
#include "../kernels/gemm.cu"
#include "../kernels/norm.cu"
#include "../kernels/rope.cu"

thread_local unsigned emu_tid_x, emu_tid_y, emu_bid_x, emu_bid_y, emu_bdim_x, emu_gdim_x;

// A block's threads are coroutines on one host thread (ucontext): each runs until it
// reaches a barrier or ends; a barrier is released when every live thread of the block
// (__syncthreads) or of the warp (a shuffle) waits at it.
enum { RUNNABLE, AT_BLOCK, AT_WARP, DONE };
static ucontext_t scheduler;
static ucontext_t contexts[1024];
static char *stacks[1024];
static int state[1024];
static unsigned current;
static float exchange[1024];
static const size_t stack_size = 256 << 10;

static void wait(int at) {
	state[current] = at;
	swapcontext(&contexts[current], &scheduler);
}

void emu_syncthreads(void) { wait(AT_BLOCK); }

float emu_bfly(float v, int lane_mask) {
	unsigned t = current, w = t / 32, lane = t % 32;
	exchange[t] = v;
	wait(AT_WARP);
	float o = exchange[w * 32 + (lane ^ lane_mask)];
	wait(AT_WARP); // nobody overwrites exchange before the whole warp has read it
	return o;
}
template <typename T> static T arg(void **p, int i) {
	if constexpr (std::is_pointer_v<T>)
		return (T)(uintptr_t) * (uint64_t *)p[i]; // a device pointer is a host address here
	else
		return *(T *)p[i];
}

template <typename... A, size_t... I> static void call(void (*f)(A...), void **p, std::index_sequence<I...>) {
	f(arg<A>(p, I)...);
}

template <typename... A> static void invoke(void (*f)(A...), void **p) { call(f, p, std::index_sequence_for<A...>{}); }

struct kernel {
	const char *name;
	void (*run)(void **params);
	bool threads; // synchronises: its threads run as coroutines
};

#define K(f, t) {#f, [](void **p) { invoke(f, p); }, t}
static const kernel kernels[] = {
	K(gemm_f32, true), K(add_bias, false), K(bias_grad, false),
	K(gelu_forward, false), K(gelu_backward, false), K(swiglu_forward, false), K(swiglu_backward, false),
	K(add, false), K(scale, false), K(adamw, false), K(f32_to_bf16, false), K(bf16_to_f32, false),
	K(sum_squares_partial, true),
	K(layernorm_forward, true), K(layernorm_backward_dx, true), K(layernorm_backward_dw, false),
	K(rmsnorm_forward, true), K(rmsnorm_backward_dx, true), K(rmsnorm_backward_dw, false),
	K(embedding_forward, false), K(embedding_backward_wte, false), K(embedding_backward_wpe, false),
	K(rope, false), K(cross_entropy, true),
	K(attention_forward, true), K(attention_backward_q, true), K(attention_backward_kv, true),
};

static const kernel *running;
static void **running_params;

static void entry(int i) {
	running->run(running_params);
	state[i] = DONE;
}

// run_block runs block (x, y) of n threads as coroutines; false on a deadlock (a barrier
// some live thread never reaches).
static bool run_block(const kernel *k, void **params, unsigned x, unsigned y, unsigned bx, unsigned n, unsigned gx) {
	running = k;
	running_params = params;
	for (unsigned i = 0; i < n; i++) {
		if (!stacks[i]) stacks[i] = new char[stack_size];
		getcontext(&contexts[i]);
		contexts[i].uc_stack.ss_sp = stacks[i];
		contexts[i].uc_stack.ss_size = stack_size;
		contexts[i].uc_link = &scheduler;
		makecontext(&contexts[i], (void (*)())entry, 1, (int)i);
		state[i] = RUNNABLE;
	}
	for (;;) {
		for (unsigned i = 0; i < n; i++) {
			if (state[i] != RUNNABLE) continue;
			current = i;
			emu_tid_x = i % bx, emu_tid_y = i / bx, emu_bid_x = x, emu_bid_y = y, emu_bdim_x = bx, emu_gdim_x = gx;
			swapcontext(&scheduler, &contexts[i]);
		}
		bool live = false, released = false;
		for (unsigned w = 0; w < n / 32; w++) {
			bool all = true, any = false;
			for (unsigned i = w * 32; i < w * 32 + 32; i++) {
				if (state[i] == DONE) continue;
				any = true;
				all = all && state[i] == AT_WARP;
			}
			if (any && all) {
				for (unsigned i = w * 32; i < w * 32 + 32; i++)
					if (state[i] == AT_WARP) state[i] = RUNNABLE;
				released = true;
			}
		}
		bool all = true;
		for (unsigned i = 0; i < n; i++) {
			if (state[i] == DONE) continue;
			live = true;
			all = all && state[i] == AT_BLOCK;
		}
		if (!live) return true;
		if (!released && all) {
			for (unsigned i = 0; i < n; i++)
				if (state[i] == AT_BLOCK) state[i] = RUNNABLE;
			released = true;
		}
		if (!released) return false;
	}
}

// emu_launch runs kernel name on a gx×gy grid of bx×by blocks; -1 if it is not a kernel
// of the emulator, 1 for a block it cannot run or a deadlock.
extern "C" int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned bx, unsigned by, void **params) {
	const kernel *k = nullptr;
	for (const kernel &c : kernels)
		if (strcmp(c.name, name) == 0) k = &c;
	if (!k) return -1;
	unsigned n = bx * by;
	if (n > 1024 || (k->threads && n % 32 != 0)) return 1;
	for (unsigned y = 0; y < gy; y++)
		for (unsigned x = 0; x < gx; x++) {
			if (k->threads) {
				if (!run_block(k, params, x, y, bx, n, gx)) return 1;
				continue;
			}
			for (unsigned i = 0; i < n; i++) {
				emu_tid_x = i % bx, emu_tid_y = i / bx, emu_bid_x = x, emu_bid_y = y, emu_bdim_x = bx, emu_gdim_x = gx;
				k->run(params);
			}
		}
	return 0;
}

// fakecuda.c: a stand-in for libcuda.so.1, for tests on machines without a GPU. Device
// memory is host memory (malloc), copies are memcpy, streams and events do nothing, and a
// kernel launch runs the kernel's own source when the library is linked with
// emukernels.cc, else a C version of "scale" and "add" and only counts the others. It checks what the Go side passes through purego: every driver function's
// arguments, cuLaunchKernel's eleven (five of them on the stack on amd64) and its
// kernelParams array. FAKECUDA_INIT_ERROR makes cuInit fail with that code;
// FAKECUDA_CC_MAJOR sets the compute capability's major number (default 8).
//
// It uses cuda.h's type names; built with -DFAKECUDA_REAL_HEADER and the CUDA toolkit's
// include directory, the compiler checks every function here against the real prototype.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef FAKECUDA_REAL_HEADER
#include <cuda.h>
#else
typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
#endif

#define MAXFN 128
static char fn_names[MAXFN][64];
static long fn_launches[MAXFN];
static int nfn;
static long frees, allocs;

// emu_launch is emukernels.cc's, when the library is built with it.
int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned bx, unsigned by, void **params)
	__attribute__((weak));

long fake_launches(const char *name) {
	for (int i = 0; i < nfn; i++)
		if (strcmp(fn_names[i], name) == 0) return fn_launches[i];
	return -1;
}
long fake_frees(void) { return frees; }
long fake_allocs(void) { return allocs; }

CUresult cuInit(unsigned flags) {
	const char *e = getenv("FAKECUDA_INIT_ERROR");
	return e ? atoi(e) : 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice *dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDeviceGetName(char *buf, int n, CUdevice dev) { strncpy(buf, "Fake GPU", n); return 0; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice dev) {
	const char *e = getenv("FAKECUDA_CC_MAJOR");
	if (attr == 75) *v = e ? atoi(e) : 8;
	else if (attr == 76) *v = 0;
	else return 1;
	return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) { *ctx = (CUcontext)0xc0; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return 0; }
CUresult cuCtxSetCurrent(CUcontext ctx) { return ctx == (CUcontext)0xc0 ? 0 : 201; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	void *m = calloc(1, n);
	if (!m) return 2;
	allocs++;
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); frees++; return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = *t = (size_t)80 << 30; return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
	memcpy(dst, (void *)(uintptr_t)src, n);
	return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	return 0;
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
	unsigned *p = (unsigned *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++) p[i] = v;
	return 0;
}
CUresult cuStreamCreate(CUstream *s, unsigned flags) { *s = (CUstream)0x5; return 0; }
CUresult cuStreamDestroy_v2(CUstream s) { return 0; }
CUresult cuStreamSynchronize(CUstream s) { return s == (CUstream)0x5 ? 0 : 400; }
CUresult cuEventCreate(CUevent *e, unsigned flags) { *e = (CUevent)0xe; return 0; }
CUresult cuEventRecord(CUevent e, CUstream s) { return 0; }
CUresult cuEventSynchronize(CUevent e) { return 0; }
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { *ms = 0; return 0; }
CUresult cuEventDestroy_v2(CUevent e) { return 0; }
CUresult cuModuleLoadData(CUmodule *mod, const void *img) {
	const char *image = img;
	if (!strstr(image, ".version") || !strstr(image, ".entry")) return 218; // CUDA_ERROR_INVALID_PTX
	static uintptr_t next = 0x100;
	*mod = (CUmodule)next++;
	return 0;
}
CUresult cuModuleUnload(CUmodule mod) { return 0; }
CUresult cuModuleGetFunction(CUfunction *fn, CUmodule mod, const char *name) {
	if (nfn == MAXFN) return 2;
	strncpy(fn_names[nfn], name, 63);
	*fn = (CUfunction)(uintptr_t)(++nfn);
	return 0;
}
CUresult cuLaunchKernel(CUfunction fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shared, CUstream stream, void **params, void **extra) {
	uintptr_t f = (uintptr_t)fh;
	if (f < 1 || f > (uintptr_t)nfn || gz != 1 || bz != 1 || stream != (CUstream)0x5 || extra) return 1;
	const char *name = fn_names[f - 1];
	fn_launches[f - 1]++;
	if (emu_launch) { // linked with emukernels.cc: run the real kernel source
		int r = emu_launch(name, gx, gy, bx, by, params);
		if (r >= 0) return r ? 1 : 0;
	}
	if (strcmp(name, "scale") == 0) { // (float *x, float s, long n)
		float *x = (float *)(uintptr_t) * (uint64_t *)params[0];
		float s = *(float *)params[1];
		long n = *(long *)params[2];
		if ((long)gx * bx < n) return 1; // the grid must cover n
		for (long i = 0; i < n; i++) x[i] *= s;
	} else if (strcmp(name, "add") == 0) { // (float *dst, const float *a, const float *b, long n)
		float *d = (float *)(uintptr_t) * (uint64_t *)params[0];
		float *a = (float *)(uintptr_t) * (uint64_t *)params[1];
		float *b = (float *)(uintptr_t) * (uint64_t *)params[2];
		long n = *(long *)params[3];
		for (long i = 0; i < n; i++) d[i] = a[i] + b[i];
	}
	return 0;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	switch ((int)r) {
	case 100: *s = "no CUDA-capable device is detected"; return 0;
	case 218: *s = "a PTX JIT compilation failed"; return 0;
	}
	*s = "unknown error";
	return 0;
}

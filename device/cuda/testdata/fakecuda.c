// fakecuda.c: a stand-in for libcuda.so.1, for tests on machines without a GPU. Device
// memory is host memory (malloc), copies are memcpy, streams and events do nothing, and a
// kernel launch runs a C version of a few kernels ("scale", "add") and only counts the
// others. It checks what the Go side passes through purego: every driver function's
// arguments, cuLaunchKernel's eleven (five of them on the stack on amd64) and its
// kernelParams array. FAKECUDA_INIT_ERROR makes cuInit fail with that code;
// FAKECUDA_CC_MAJOR sets the compute capability's major number (default 8).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

#define MAXFN 128
static char fn_names[MAXFN][64];
static long fn_launches[MAXFN];
static int nfn;
static long frees, allocs;

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
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDeviceGetName(char *buf, int n, int dev) { strncpy(buf, "Fake GPU", n); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
	const char *e = getenv("FAKECUDA_CC_MAJOR");
	if (attr == 75) *v = e ? atoi(e) : 8;
	else if (attr == 76) *v = 0;
	else return 1;
	return 0;
}
CUresult cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev) { *ctx = 0xc0; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return 0; }
CUresult cuCtxSetCurrent(uintptr_t ctx) { return ctx == 0xc0 ? 0 : 201; }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
	void *m = calloc(1, n);
	if (!m) return 2;
	allocs++;
	*p = (uint64_t)(uintptr_t)m;
	return 0;
}
CUresult cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); frees++; return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = *t = (size_t)80 << 30; return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, uintptr_t s) {
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, uintptr_t s) {
	memcpy(dst, (void *)(uintptr_t)src, n);
	return 0;
}
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, uintptr_t s) {
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	return 0;
}
CUresult cuMemsetD32Async(uint64_t dst, unsigned v, size_t n, uintptr_t s) {
	unsigned *p = (unsigned *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++) p[i] = v;
	return 0;
}
CUresult cuStreamCreate(uintptr_t *s, unsigned flags) { *s = 0x5; return 0; }
CUresult cuStreamDestroy_v2(uintptr_t s) { return 0; }
CUresult cuStreamSynchronize(uintptr_t s) { return s == 0x5 ? 0 : 400; }
CUresult cuEventCreate(uintptr_t *e, unsigned flags) { *e = 0xe; return 0; }
CUresult cuEventRecord(uintptr_t e, uintptr_t s) { return 0; }
CUresult cuEventSynchronize(uintptr_t e) { return 0; }
CUresult cuEventElapsedTime(float *ms, uintptr_t a, uintptr_t b) { *ms = 0; return 0; }
CUresult cuEventDestroy_v2(uintptr_t e) { return 0; }
CUresult cuModuleLoadData(uintptr_t *mod, const char *image) {
	if (!strstr(image, ".version") || !strstr(image, ".entry")) return 218; // CUDA_ERROR_INVALID_PTX
	static uintptr_t next = 0x100;
	*mod = next++;
	return 0;
}
CUresult cuModuleUnload(uintptr_t mod) { return 0; }
CUresult cuModuleGetFunction(uintptr_t *fn, uintptr_t mod, const char *name) {
	if (nfn == MAXFN) return 2;
	strncpy(fn_names[nfn], name, 63);
	*fn = (uintptr_t)(++nfn);
	return 0;
}
CUresult cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shared, uintptr_t stream, void **params, void **extra) {
	if (f < 1 || f > (uintptr_t)nfn || gz != 1 || bz != 1 || stream != 0x5 || extra) return 1;
	const char *name = fn_names[f - 1];
	fn_launches[f - 1]++;
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
	switch (r) {
	case 100: *s = "no CUDA-capable device is detected"; return 0;
	case 218: *s = "a PTX JIT compilation failed"; return 0;
	}
	*s = "unknown error";
	return 0;
}

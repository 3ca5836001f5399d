/* A stand-in for libnvidia-ml.so.1 with two devices, built by gpu_nvml_dlopen_test.go to
 * check the run-time binding without a GPU: argument passing, struct layouts, and that
 * a string filling the whole buffer without a NUL is read no further than the buffer.
 * Signatures and layouts as in nvml.h. */
#include <string.h>

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
	unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
		sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
		computeInstanceSliceCount;
	unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

static int inits;
static char devs[2];

int nvmlInit_v2(void) { inits++; return 0; }
int nvmlShutdown(void) { if (inits == 0) return 1; inits--; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { if (!inits) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev) {
	if (i >= 2) return 2;
	*dev = &devs[i];
	return 0;
}
static int index_of(void *dev) { return (char *)dev - devs; }
int nvmlDeviceGetName(void *dev, char *buf, unsigned int len) {
	if (index_of(dev) == 1) { memset(buf, 'x', len); return 0; } /* no NUL */
	if (len < 32) return 7;
	strcpy(buf, "Fake NVIDIA H100 80GB HBM3");
	return 0;
}
int nvmlDeviceGetUUID(void *dev, char *buf, unsigned int len) {
	if (len < 48) return 7;
	strcpy(buf, index_of(dev) ? "GPU-00000000-0000-0000-0000-000000000001"
	                          : "GPU-00000000-0000-0000-0000-000000000000");
	return 0;
}
int nvmlDeviceGetMemoryInfo(void *dev, nvmlMemory_t *m) {
	m->total = 85520809984ULL; m->free = 84935966720ULL + index_of(dev); m->used = 584843264ULL;
	return 0;
}
int nvmlDeviceGetAttributes_v2(void *dev, nvmlDeviceAttributes_t *a) {
	memset(a, 0, sizeof *a);
	a->multiprocessorCount = 132; a->memorySizeMB = 81559;
	return 0;
}
int nvmlDeviceGetMaxClockInfo(void *dev, int type, unsigned int *mhz) {
	switch (type) {
	case 1: *mhz = 1980; return 0; /* NVML_CLOCK_SM */
	case 2: *mhz = 2619; return 0; /* NVML_CLOCK_MEM */
	}
	return 3;
}
int nvmlDeviceGetCudaComputeCapability(void *dev, int *major, int *minor) {
	*major = 9; *minor = index_of(dev);
	return 0;
}

package fingerprint

import "fmt"

// nvmlReturn is nvmlReturn_t, NVML's result code. Every code but nvmlSuccess is an error.
type nvmlReturn uint32

// The codes of nvml.h the profiler branches on; the others print through nvmlReturnText.
const (
	nvmlSuccess               nvmlReturn = 0
	nvmlErrorNoPermission     nvmlReturn = 4
	nvmlErrorDriverNotLoaded  nvmlReturn = 9
	nvmlErrorLibraryNotFound  nvmlReturn = 12
	nvmlErrorFunctionNotFound nvmlReturn = 13
	nvmlErrorGPUIsLost        nvmlReturn = 15
	nvmlErrorUnknown          nvmlReturn = 999
)

// nvmlReturnText is what nvmlErrorString says for codes 0..30 of nvml.h; the profiler
// keeps its own copy so that it never reads a C string it did not allocate.
var nvmlReturnText = [...]string{
	"Success", "Uninitialized", "Invalid Argument", "Not Supported",
	"Insufficient Permissions", "Already Initialized", "Not Found", "Insufficient Size",
	"Insufficient External Power", "Driver Not Loaded", "Timeout", "Interrupt request issue",
	"NVML Shared Library Not Found", "Function Not Found", "Corrupted infoROM", "GPU is lost",
	"GPU requires restart", "The operating system has blocked the request",
	"RM has detected an NVML/RM version mismatch", "In use by another client",
	"Insufficient Memory", "No data", "The requested vgpu operation is not available on target device, because ECC is enabled",
	"Insufficient resources for request", "The requested frequency is not supported",
	"The provided version is invalid/unsupported", "The requested functionality has been deprecated",
	"The system is not ready for the request", "No GPUs were found", "Resource not in correct state",
	"The reset type is not supported",
}

// Error returns NVML's text for r and its number.
func (r nvmlReturn) Error() string {
	if int(r) < len(nvmlReturnText) {
		return fmt.Sprintf("%s (NVML %d)", nvmlReturnText[r], uint32(r))
	}
	if r == nvmlErrorUnknown {
		return "Unknown Error (NVML 999)"
	}
	return fmt.Sprintf("NVML error %d", uint32(r))
}

// meansNoGPU reports whether an nvmlInit result means this machine has no usable NVIDIA
// GPU (no library, no driver, or no permission to the devices) rather than a fault.
func (r nvmlReturn) meansNoGPU() bool {
	switch r {
	case nvmlErrorLibraryNotFound, nvmlErrorDriverNotLoaded, nvmlErrorNoPermission:
		return true
	}
	return false
}

package cuda

import "fmt"

// cuResult is the driver API's CUresult; 0 is CUDA_SUCCESS.
type cuResult int32

// cublasStatus is cuBLASLt's cublasStatus_t; 0 is CUBLAS_STATUS_SUCCESS.
type cublasStatus int32

// Error is a failed driver or cuBLASLt call: the function, its result code and the
// library's description of it.
type Error struct {
	Call string
	Code int32
	Text string
}

func (e *Error) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("cuda: %s: error %d", e.Call, e.Code)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Text, e.Code)
}

// cublasStatusText names cuBLAS's status codes (cublas_api.h), which cuBLASLt shares.
func cublasStatusText(s cublasStatus) string {
	switch s {
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return ""
}

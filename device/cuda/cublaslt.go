//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/meshnode/meshnode/internal/dynlib"
)

// cublasLtLibraries are the cuBLASLt sonames tried in order, newest first (CUDA 13, 12,
// 11). cuBLASLt ships with the CUDA toolkit or the nvidia-cublas wheels, not the driver.
var cublasLtLibraries = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"}

// cuBLASLt constants (cublasLt.h, library_types.h).
const (
	cublasCompute32F         = 68 // CUBLAS_COMPUTE_32F
	cublasCompute32FFastTF32 = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
	cudaR32F                 = 0  // CUDA_R_32F
	cudaR16BF                = 14 // CUDA_R_16BF
	cublasLtDescTransA       = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	cublasLtDescTransB       = 4  // CUBLASLT_MATMUL_DESC_TRANSB
)

// cublasLt is the part of cuBLASLt the backend calls.
type cublasLt struct {
	handle uintptr
	soname string

	create        func(h *uintptr) cublasStatus
	destroy       func(h uintptr) cublasStatus
	getVersion    func() uint64
	descCreate    func(d *uintptr, compute, scale int32) cublasStatus
	descDestroy   func(d uintptr) cublasStatus
	descSetAttr   func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) cublasStatus
	layoutCreate  func(l *uintptr, dtype int32, rows, cols uint64, ld int64) cublasStatus
	layoutDestroy func(l uintptr) cublasStatus
	matmul        func(h, desc uintptr, alpha unsafe.Pointer, a uint64, adesc uintptr, b uint64, bdesc uintptr, beta unsafe.Pointer, c uint64, cdesc uintptr, d uint64, ddesc uintptr, algo unsafe.Pointer, ws uint64, wsSize uint64, stream uintptr) cublasStatus
	ltHandle      uintptr // the cublasLtHandle_t made by open
}

// errNoCublasLt says no cuBLASLt library could be loaded.
var errNoCublasLt = errors.New("no cuBLASLt")

// openCublasLt loads the first of names that exists, binds its functions and creates a
// handle. The error lists every name tried.
func openCublasLt(names []string) (*cublasLt, error) {
	var tried []string
	for _, name := range names {
		h, err := dynlib.Open(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, name)
			continue
		}
		l := &cublasLt{handle: h, soname: name}
		if err := l.bindAll(); err != nil {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if s := l.create(&l.ltHandle); s != 0 {
			_ = purego.Dlclose(h)
			return nil, l.err("cublasLtCreate", s)
		}
		return l, nil
	}
	return nil, fmt.Errorf("%w: %s not found (install the CUDA toolkit's cuBLAS or the nvidia-cublas wheel)", errNoCublasLt, strings.Join(tried, ", "))
}

func (l *cublasLt) bindAll() error {
	for _, f := range []struct {
		fn   any
		name string
	}{
		{&l.create, "cublasLtCreate"},
		{&l.destroy, "cublasLtDestroy"},
		{&l.getVersion, "cublasLtGetVersion"},
		{&l.descCreate, "cublasLtMatmulDescCreate"},
		{&l.descDestroy, "cublasLtMatmulDescDestroy"},
		{&l.descSetAttr, "cublasLtMatmulDescSetAttribute"},
		{&l.layoutCreate, "cublasLtMatrixLayoutCreate"},
		{&l.layoutDestroy, "cublasLtMatrixLayoutDestroy"},
		{&l.matmul, "cublasLtMatmul"},
	} {
		if err := bind(l.handle, f.fn, f.name); err != nil {
			return err
		}
	}
	return nil
}

func (l *cublasLt) err(call string, s cublasStatus) error {
	return &Error{Call: call, Code: int32(s), Text: cublasStatusText(s)}
}

// close destroys the handle and unloads the library.
func (l *cublasLt) close() {
	l.destroy(l.ltHandle)
	_ = purego.Dlclose(l.handle)
}

// ltGemm is one row-major GEMM C = alpha·op(A)·op(B) + beta·C through cuBLASLt, as the
// column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's A is our B and its B our A, with
// the transposes carried over and the dimensions swapped. a and b are of elemType
// (cudaR32F or cudaR16BF), c is float32; compute is cublasCompute32F or its TF32 variant.
func (l *cublasLt) ltGemm(stream uintptr, compute, elemType int32, tA, tB bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	var desc uintptr
	if s := l.descCreate(&desc, compute, cudaR32F); s != 0 {
		return l.err("cublasLtMatmulDescCreate", s)
	}
	defer l.descDestroy(desc)
	opA, opB := op(tB), op(tA)
	if s := l.descSetAttr(desc, cublasLtDescTransA, unsafe.Pointer(&opA), 4); s != 0 {
		return l.err("cublasLtMatmulDescSetAttribute", s)
	}
	if s := l.descSetAttr(desc, cublasLtDescTransB, unsafe.Pointer(&opB), 4); s != 0 {
		return l.err("cublasLtMatmulDescSetAttribute", s)
	}
	// Column-major storage shapes: our B (k×n row-major, or n×k when tB) is n×k (or k×n).
	br, bc := n, k
	if tB {
		br, bc = k, n
	}
	ar, ac := k, m
	if tA {
		ar, ac = m, k
	}
	var la, lb, lc uintptr
	for _, x := range []struct {
		l          *uintptr
		dt         int32
		rows, cols int
		ld         int
	}{{&la, elemType, br, bc, ldb}, {&lb, elemType, ar, ac, lda}, {&lc, cudaR32F, n, m, ldc}} {
		if s := l.layoutCreate(x.l, x.dt, uint64(x.rows), uint64(x.cols), int64(x.ld)); s != 0 {
			return l.err("cublasLtMatrixLayoutCreate", s)
		}
		defer l.layoutDestroy(*x.l)
	}
	if s := l.matmul(l.ltHandle, desc, unsafe.Pointer(&alpha), b, la, a, lb, unsafe.Pointer(&beta), c, lc, c, lc, nil, 0, 0, stream); s != 0 {
		return l.err("cublasLtMatmul", s)
	}
	return nil
}

// op is cublasOperation_t: CUBLAS_OP_T (1) when t, CUBLAS_OP_N (0) otherwise.
func op(t bool) int32 {
	if t {
		return 1
	}
	return 0
}

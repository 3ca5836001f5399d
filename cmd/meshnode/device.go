package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cuda"
)

// Device choices of --device.
const (
	deviceCPU  = "cpu"
	deviceCUDA = "cuda"
	deviceAuto = "auto"
)

// deviceOptions are the flags that choose where `meshnode train` computes.
type deviceOptions struct {
	device    string // cpu, cuda or auto
	precision string // auto, fp32 or bf16
	cudaGemm  string // cuda.Config.GEMM
}

func (d *deviceOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.device, "device", deviceCPU, "where to compute: cpu, cuda (an NVIDIA GPU through its driver; fails when there is none) or auto (cuda when usable, else cpu, saying why)")
	f.StringVar(&d.precision, "precision", string(jobspec.PrecisionAuto), "arithmetic: auto (fp32 today), fp32 or bf16 (not implemented yet)")
	f.StringVar(&d.cudaGemm, "cuda-gemm", cuda.GemmKernel, "GEMM path on cuda: kernel (deterministic), cublaslt (fp32) or cublaslt-tf32")
}

// validate checks the words before anything is loaded.
func (d *deviceOptions) validate() error {
	switch d.device {
	case deviceCPU, deviceCUDA, deviceAuto:
	default:
		return usagef("--device must be cpu, cuda or auto (got %q)", d.device)
	}
	if _, err := jobspec.ParsePrecision("--precision", d.precision); err != nil {
		return usageError{err: err}
	}
	if err := (cuda.Config{GEMM: d.cudaGemm}).Validate(); err != nil {
		return usagef("--cuda-gemm: %v", strings.TrimPrefix(err.Error(), "cuda: "))
	}
	return nil
}

// open returns the backend to train on (nil: the CPU's) and its closer. --device cuda
// without a usable GPU is a usage error (exit 2) naming what is missing; --device auto
// then falls back to the CPU and says why once on stderr.
func (d *deviceOptions) open(stderr io.Writer) (device.Backend, func(), error) {
	if d.device == deviceCPU {
		return nil, func() {}, nil
	}
	b, err := cuda.Open(cuda.Config{GEMM: d.cudaGemm})
	if err != nil {
		if d.device == deviceCUDA {
			return nil, nil, usagef("--device cuda: %v", err)
		}
		fmt.Fprintf(stderr, "meshnode: --device auto: training on the CPU: %v\n", err)
		return nil, func() {}, nil
	}
	fmt.Fprintf(stderr, "meshnode: training on %s\n", b.Describe())
	return b, func() { b.Close() }, nil
}

// cudaStatus is `meshnode version`'s line about CUDA: usable, with the device, or why not.
func cudaStatus() string {
	b, err := cuda.Open(cuda.DefaultConfig())
	if err != nil {
		return "unusable: " + err.Error()
	}
	defer b.Close()
	return "usable: " + b.Describe()
}

package ptxgen

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Arch is the architecture the PTX targets: sm_80 PTX runs (JIT-compiled by the driver) on
// Ampere, Ada and Hopper.
const Arch = "sm_80"

// Compiler is a CUDA-to-PTX compiler found on this machine.
type Compiler struct {
	Name    string // "nvcc" or "clang"
	Path    string
	Version string
	Flags   []string
}

// clangFlags compile CUDA device code to PTX without the CUDA SDK: no CUDA headers, no
// libdevice (kernels/common.cuh declares what the kernels use), PTX ISA 7.0.
var clangFlags = []string{"-x", "cuda", "--cuda-gpu-arch=" + Arch, "--cuda-device-only", "-nocudainc", "-nocudalib",
	"-Xclang", "-target-feature", "-Xclang", "+ptx70", "-O3", "-S"}

var nvccFlags = []string{"-ptx", "-arch=compute_80", "-O3"}

// FindCompiler returns nvcc when it is installed (on PATH or in $CUDA_HOME/bin), clang
// otherwise; want ("nvcc" or "clang", from MESHNODE_PTX_COMPILER) insists on one.
func FindCompiler(want string) (Compiler, error) {
	if want != "" && want != "nvcc" && want != "clang" {
		return Compiler{}, fmt.Errorf("MESHNODE_PTX_COMPILER must be nvcc or clang (got %q)", want)
	}
	var tried []string
	if want != "clang" {
		for _, p := range []string{"nvcc", filepath.Join(os.Getenv("CUDA_HOME"), "bin", "nvcc")} {
			if path, err := exec.LookPath(p); err == nil {
				return newCompiler("nvcc", path, nvccFlags)
			}
		}
		tried = append(tried, "nvcc (PATH, $CUDA_HOME/bin)")
	}
	if want != "nvcc" {
		if path, err := exec.LookPath("clang"); err == nil {
			return newCompiler("clang", path, clangFlags)
		}
		tried = append(tried, "clang")
	}
	return Compiler{}, fmt.Errorf("no CUDA compiler: tried %s; install the CUDA toolkit or clang (apt-get install clang)", strings.Join(tried, ", "))
}

func newCompiler(name, path string, flags []string) (Compiler, error) {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return Compiler{}, fmt.Errorf("%s --version: %v", path, err)
	}
	return Compiler{Name: name, Path: path, Version: versionLine(name, string(out)), Flags: flags}, nil
}

// versionLine picks the line that names the version: clang's first, nvcc's "release" line.
func versionLine(name, out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if name == "nvcc" {
		for _, l := range lines {
			if strings.Contains(l, "release") {
				return strings.TrimSpace(l)
			}
		}
	}
	return strings.TrimSpace(lines[0])
}

// Compile compiles source (a .cu path) to ptx.
func (c Compiler) Compile(source, ptx string) error {
	args := append(slices.Clone(c.Flags), "-o", ptx, source)
	cmd := exec.Command(c.Path, args...)
	cmd.Dir = filepath.Dir(source)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", c.Name, filepath.Base(source), err, out)
	}
	return nil
}

// Generate compiles every .cu in dir to PTX beside it and rewrites the manifest.
func Generate(dir string, c Compiler) (Manifest, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Manifest{}, err
	}
	src, err := HashSources(dir)
	if err != nil {
		return Manifest{}, err
	}
	if len(src) == 0 {
		return Manifest{}, errors.New(dir + ": no .cu files")
	}
	for name := range src {
		if filepath.Ext(name) == ".cu" {
			if err := c.Compile(filepath.Join(dir, name), filepath.Join(dir, PTXName(name))); err != nil {
				return Manifest{}, err
			}
		}
	}
	ptx, err := HashPTX(dir)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Arch: Arch, Compiler: c.Name, CompilerVersion: c.Version, Flags: c.Flags, Sources: src, PTX: ptx}
	return m, m.Write(dir)
}

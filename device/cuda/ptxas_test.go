package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPTXAssembles runs NVIDIA's assembler, where one is installed (ptxas on PATH or in
// $CUDA_HOME/bin), over every embedded PTX file for Ampere and Hopper, and requires it to
// accept the code without spilling registers: what the driver's JIT will do at Open.
func TestPTXAssembles(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		if ptxas, err = exec.LookPath(filepath.Join(os.Getenv("CUDA_HOME"), "bin", "ptxas")); err != nil {
			t.Skip("no ptxas (CUDA toolkit) here")
		}
	}
	dir := t.TempDir()
	for mod := range kernelNames {
		src, err := ptxSource(mod)
		if err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(dir, mod)
		if err := os.WriteFile(in, src[:len(src)-1], 0o644); err != nil {
			t.Fatal(err)
		}
		for _, arch := range []string{"sm_80", "sm_90"} {
			out, err := exec.Command(ptxas, "-arch="+arch, "-O3", "-v", "-o", filepath.Join(dir, mod+"."+arch+".cubin"), in).CombinedOutput()
			if err != nil {
				t.Fatalf("ptxas %s for %s: %v\n%s", mod, arch, err, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "spill stores") && !strings.Contains(line, " 0 bytes spill stores") {
					t.Errorf("%s on %s spills: %s", mod, arch, strings.TrimSpace(line))
				}
			}
		}
	}
}

package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/device/cuda/internal/ptxgen"
)

// TestPTXIsFresh recomputes the kernels' source hashes and compares them with the
// manifest `go generate` wrote: a .cu edited without regenerating its PTX (or PTX edited
// by hand) fails here, on any machine, without a GPU.
func TestPTXIsFresh(t *testing.T) {
	m, err := ptxgen.ReadManifest("kernels")
	if err != nil {
		t.Fatal(err)
	}
	src, err := ptxgen.HashSources("kernels")
	if err != nil {
		t.Fatal(err)
	}
	ptx, err := ptxgen.HashPTX("kernels")
	if err != nil {
		t.Fatal(err)
	}
	if stale := m.Stale(src, ptx); len(stale) > 0 {
		t.Fatalf("the committed PTX is stale; run `go generate ./device/cuda`:\n%s", strings.Join(stale, "\n"))
	}
	if m.Compiler != "nvcc" && m.Compiler != "clang" || m.CompilerVersion == "" || m.Arch != ptxgen.Arch {
		t.Fatalf("manifest names compiler %q version %q arch %q", m.Compiler, m.CompilerVersion, m.Arch)
	}
}

// TestStaleDetectsEveryChange feeds the staleness check each kind of change.
func TestStaleDetectsEveryChange(t *testing.T) {
	m := ptxgen.Manifest{Sources: map[string]string{"a.cu": "1", "c.cuh": "2"}, PTX: map[string]string{"a.ptx": "3"}}
	src := map[string]string{"a.cu": "1", "c.cuh": "2"}
	ptx := map[string]string{"a.ptx": "3"}
	if s := m.Stale(src, ptx); len(s) != 0 {
		t.Fatalf("unchanged files reported stale: %v", s)
	}
	for _, c := range []struct {
		name     string
		src, ptx map[string]string
		want     string
	}{
		{"source edited", map[string]string{"a.cu": "9", "c.cuh": "2"}, ptx, "source a.cu changed"},
		{"header edited", map[string]string{"a.cu": "1", "c.cuh": "9"}, ptx, "source c.cuh changed"},
		{"source added", map[string]string{"a.cu": "1", "c.cuh": "2", "b.cu": "4"}, ptx, "b.cu has no b.ptx"},
		{"source removed", map[string]string{"a.cu": "1"}, ptx, "c.cuh is in the manifest but gone"},
		{"ptx edited", src, map[string]string{"a.ptx": "9"}, "ptx a.ptx changed"},
	} {
		s := strings.Join(m.Stale(c.src, c.ptx), "\n")
		if !strings.Contains(s, c.want) {
			t.Errorf("%s: got %q, want a line saying %q", c.name, s, c.want)
		}
	}
}

// TestEmbeddedPTXDefinesEveryKernel checks that each kernel the backend launches is an
// entry of the embedded PTX, and that the PTX is well-formed enough to name its target.
func TestEmbeddedPTXDefinesEveryKernel(t *testing.T) {
	for mod, names := range kernelNames {
		b, err := ptxSource(mod)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !strings.Contains(text, ".target "+ptxgen.Arch) || b[len(b)-1] != 0 {
			t.Errorf("%s: not sm_80 PTX with a NUL terminator", mod)
		}
		for _, n := range names {
			if !ptxDefines(text, n) {
				t.Errorf("%s defines no kernel %s", mod, n)
			}
		}
	}
}

// TestGenerateIsReproducible recompiles the kernels when the manifest's compiler, at the
// same version, is on this machine, and requires the committed PTX byte for byte.
func TestGenerateIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the kernels")
	}
	m, err := ptxgen.ReadManifest("kernels")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ptxgen.FindCompiler(m.Compiler)
	if err != nil || c.Version != m.CompilerVersion {
		t.Skipf("the manifest's compiler (%s, %s) is not here: %v", m.Compiler, m.CompilerVersion, err)
	}
	dir := t.TempDir()
	for name := range m.Sources {
		b, err := os.ReadFile(filepath.Join("kernels", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ptxgen.Generate(dir, c); err != nil {
		t.Fatal(err)
	}
	for name := range m.PTX {
		want, _ := os.ReadFile(filepath.Join("kernels", name))
		got, _ := os.ReadFile(filepath.Join(dir, name))
		if !bytes.Equal(got, want) {
			t.Errorf("%s: recompiled PTX differs from the committed one", name)
		}
	}
}

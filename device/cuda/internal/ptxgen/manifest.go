package ptxgen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestName is the manifest's file name in the kernels directory.
const ManifestName = "manifest.json"

// Manifest records how the committed PTX was made.
type Manifest struct {
	// Arch is the virtual architecture the PTX targets (sm_80: Ampere and newer JIT it).
	Arch string `json:"arch"`
	// Compiler is "nvcc" or "clang"; CompilerVersion its --version line.
	Compiler        string `json:"compiler"`
	CompilerVersion string `json:"compiler_version"`
	// Flags are the compiler's arguments besides input and output.
	Flags []string `json:"flags"`
	// Sources maps every .cu and .cuh file to its SHA-256 (hex).
	Sources map[string]string `json:"sources"`
	// PTX maps every generated .ptx file to its SHA-256.
	PTX map[string]string `json:"ptx"`
}

// HashSources is the SHA-256 of every .cu and .cuh file in dir, by file name.
func HashSources(dir string) (map[string]string, error) {
	return hashFiles(dir, ".cu", ".cuh")
}

// HashPTX is the SHA-256 of every .ptx file in dir.
func HashPTX(dir string) (map[string]string, error) { return hashFiles(dir, ".ptx") }

func hashFiles(dir string, exts ...string) (map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range ents {
		if e.IsDir() || !slices.Contains(exts, filepath.Ext(e.Name())) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = hex.EncodeToString(sum[:])
	}
	return out, nil
}

// ReadManifest reads dir's manifest.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestName, err)
	}
	return m, nil
}

// Write writes m as dir's manifest.
func (m Manifest) Write(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644)
}

// Stale lists, one line each, how the files in sources and ptx (as HashSources and HashPTX
// return them) differ from the manifest: a source changed, added or removed since the PTX
// was generated, a PTX file edited by hand, a .cu without its PTX. Empty means up to date.
func (m Manifest) Stale(sources, ptx map[string]string) []string {
	var out []string
	out = append(out, diff("source", m.Sources, sources)...)
	out = append(out, diff("ptx", m.PTX, ptx)...)
	for name := range sources {
		if strings.HasSuffix(name, ".cu") {
			if _, ok := ptx[PTXName(name)]; !ok {
				out = append(out, fmt.Sprintf("%s has no %s", name, PTXName(name)))
			}
		}
	}
	slices.Sort(out)
	return out
}

func diff(what string, want, got map[string]string) []string {
	var out []string
	for name, h := range got {
		switch w, ok := want[name]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s is not in the manifest", what, name))
		case w != h:
			out = append(out, fmt.Sprintf("%s %s changed (sha256 %.12s…, manifest %.12s…)", what, name, h, w))
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			out = append(out, fmt.Sprintf("%s %s is in the manifest but gone", what, name))
		}
	}
	return out
}

// PTXName is the PTX file generated from the source file name (gemm.cu → gemm.ptx).
func PTXName(source string) string { return strings.TrimSuffix(source, ".cu") + ".ptx" }

package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/fingerprint"

	"github.com/meshnode/meshnode/kernels"
)

func TestVersionJSON(t *testing.T) {
	stdout, stderr, code := runMeshCLI(t, "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got versionInfo
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v: %q", err, stdout)
	}
	// A test binary records no VCS revision.
	want := versionInfo{Version: Version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		Commit: "unknown", Kernels: kernels.GemmName(), GPU: fingerprint.GPUDetection(), CUDA: cudaStatus()}
	if got != want {
		t.Errorf("version -o json = %+v, want %+v", got, want)
	}
	if got.Kernels == "" || got.GPU == "" {
		t.Errorf("empty kernel path or GPU detection: %+v", got)
	}
}

func TestVersionText(t *testing.T) {
	stdout, stderr, code := runMeshCLI(t, "version")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"meshnode " + Version, runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH,
		"commit:  unknown", "kernels: " + kernels.GemmName(), "gpu:     " + fingerprint.GPUDetection(), "cuda:    " + cudaStatus()} {
		if !strings.Contains(stdout, want) {
			t.Errorf("version output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestVersionBadOutputFormat(t *testing.T) {
	_, stderr, code := runMeshCLI(t, "version", "-o", "yaml")
	if code == 0 || !strings.Contains(stderr, "--output") {
		t.Errorf("exit %d, stderr %q; want an error naming --output", code, stderr)
	}
}

func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
	}}
	info := currentVersion(bi, true)
	if info.Go != "go1.99.1" || info.Commit != "0123456789abcdef0123456789abcdef01234567" || !info.Modified {
		t.Errorf("from build info: %+v", info)
	}
	if !strings.Contains(info.text(), "commit:  0123456789abcdef0123456789abcdef01234567 (modified)") {
		t.Errorf("text:\n%s", info.text())
	}
	for _, none := range []*debug.BuildInfo{nil, {Settings: []debug.BuildSetting{{Key: "vcs.revision"}}}} {
		if info := currentVersion(none, none != nil); info.Commit != "unknown" || info.Go != runtime.Version() {
			t.Errorf("without a revision: %+v", info)
		}
	}
}

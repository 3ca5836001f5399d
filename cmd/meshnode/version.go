package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/meshnode/meshnode/node/fingerprint"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/kernels"
)

// Version is meshnode's release, set at link time with -ldflags "-X main.Version=…".
var Version = "0.1.0-dev"

// versionInfo is what `meshnode version` reports about this binary.
type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	// Commit is the VCS revision the binary was built from, "unknown" when the build did
	// not record one (go run, go test, -buildvcs=false, a build outside a checkout).
	Commit   string `json:"commit"`
	Modified bool   `json:"modified,omitempty"` // built from a checkout with local changes
	// Kernels is the CPU GEMM path the engine dispatches to: "avx512", "avx2" or "go".
	Kernels string `json:"kernels"`
	GPU     string `json:"gpu"` // how this build finds GPUs
	// CUDA says whether `train --device cuda` can run here: "usable: " and the device, or
	// "unusable: " and what is missing (no driver, a static build, no device).
	CUDA string `json:"cuda"`
}

type versionOptions struct {
	output string
}

func newVersionCmd() *cobra.Command {
	var o versionOptions
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print meshnode's version, the Go and commit it was built with, and its CPU kernel path",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			info := currentVersion(debug.ReadBuildInfo())
			info.CUDA = cudaStatus()
			if o.output == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), info.text())
			return err
		},
	}
	addOutputFlag(cmd, &o.output)
	return cmd
}

// currentVersion describes this binary from its build information (bi, ok as
// debug.ReadBuildInfo returns them).
func currentVersion(bi *debug.BuildInfo, ok bool) versionInfo {
	info := versionInfo{
		Version: Version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		Commit: "unknown", Kernels: kernels.GemmName(), GPU: fingerprint.GPUDetection(),
	}
	if !ok || bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				info.Commit = s.Value
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// text renders info for people, one fact a line.
func (info versionInfo) text() string {
	commit := info.Commit
	if info.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("meshnode %s\ngo:      %s %s/%s\ncommit:  %s\nkernels: %s\ngpu:     %s\ncuda:    %s\n",
		info.Version, info.Go, info.OS, info.Arch, commit, info.Kernels, info.GPU, info.CUDA)
}

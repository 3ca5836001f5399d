package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/meshnode/meshnode"

// Network and consensus libraries, by import-path fragment.
var (
	libp2p = "github.com/libp2p/"
	quic   = "github.com/quic-go/"
	raft   = "github.com/hashicorp/raft"
)

// rules are the graph's promises: a package and the fragments none of its dependencies
// (its own included) may contain, or, with only, the module packages it may depend on.
var rules = []struct {
	pkg    string
	forbid []string
	only   []string // module packages allowed (besides pkg itself); nil: not checked
	why    string
}{
	{pkg: "./parallel/...", forbid: []string{libp2p, quic, raft}, why: "the engine opens no sockets"},
	{pkg: "./model", forbid: []string{libp2p, quic, raft}, why: "the model computes, it does not talk"},
	{pkg: "./kernels/...", forbid: []string{libp2p, quic, raft}, why: "kernels compute, they do not talk"},
	{pkg: "./balancer", forbid: []string{libp2p, quic, raft}, why: "placement is arithmetic"},
	{pkg: "./scheduler", forbid: []string{libp2p, quic, raft}, why: "the leader's decisions are pure functions"},
	{pkg: "./api", forbid: []string{libp2p, quic, raft}, why: "the API client is not the server (nomad's api/)"},
	{pkg: "./records", only: []string{"consensus/jobspec"}, why: "the replicated records are a leaf"},
	{pkg: "./consensus/jobspec", only: []string{}, why: "the job spec is a leaf"},
	{pkg: "./device", only: []string{}, why: "the device interface imports nothing of ours"},
	{pkg: "./device/cpu", forbid: []string{libp2p, quic, raft}, why: "a backend computes, it does not talk"},
	{pkg: "./tokenizer", only: []string{}, forbid: []string{libp2p, quic, raft}, why: "the tokenizer is a leaf"},
}

// TestConformanceSuiteIsForTestsOnly: the binary does not link device/devicetest.
func TestConformanceSuiteIsForTestsOnly(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list dependencies with")
	}
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/meshnode").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), module+"/device/devicetest") {
		t.Error("cmd/meshnode links device/devicetest: the conformance suite is for tests only")
	}
}

// TestImportGraph runs `go list -deps` on each rule's package and fails on a dependency
// the rule forbids.
func TestImportGraph(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list dependencies with")
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", module+strings.TrimPrefix(r.pkg, ".")).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", r.pkg, err, out)
		}
		deps := strings.Fields(string(out))
		self := strings.TrimSuffix(module+strings.TrimPrefix(r.pkg, "."), "/...")
		for _, d := range deps {
			for _, f := range r.forbid {
				if strings.Contains(d, f) {
					t.Errorf("%s depends on %s: %s", r.pkg, d, r.why)
				}
			}
			if r.only == nil || !strings.HasPrefix(d, module+"/") || strings.HasPrefix(d, self) {
				continue
			}
			if !allowed(strings.TrimPrefix(d, module+"/"), r.only) {
				t.Errorf("%s depends on %s: %s (allowed: %v)", r.pkg, d, r.why, r.only)
			}
		}
	}
}

func allowed(pkg string, only []string) bool {
	for _, o := range only {
		if pkg == o {
			return true
		}
	}
	return false
}

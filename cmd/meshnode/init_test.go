package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// runMeshCLI runs one command line in-process and returns stdout, stderr and the exit code.
func runMeshCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

func TestInitPrintsSecretAndJoinLines(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runMeshCLI(t, "init", "-o", "json", "--data-dir", dir, "--mesh", "lab")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res initResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.JoinSecret) != 43 || res.Mesh != "lab" || !strings.Contains(res.OtherJoin, "--bootstrap "+res.Bootstrap) ||
		!strings.HasSuffix(res.Bootstrap, "/p2p/"+res.ID) {
		t.Errorf("init -o json = %+v", res)
	}
	again, _, _ := runMeshCLI(t, "init", "-o", "json", "--data-dir", dir)
	var res2 initResult
	json.Unmarshal([]byte(again), &res2)
	if res2.JoinSecret == res.JoinSecret || res2.ID != res.ID {
		t.Errorf("second init: secret reused (%v) or identity changed (%v)", res2.JoinSecret == res.JoinSecret, res2.ID != res.ID)
	}
	// id reads the same identity; MESHNODE_OUTPUT stands in for -o.
	t.Setenv("MESHNODE_OUTPUT", "json")
	idOut, _, code := runMeshCLI(t, "id", "--data-dir", dir)
	if code != 0 || strings.TrimSpace(idOut) != `{"id":"`+res.ID+`"}` {
		t.Errorf("id = %q (exit %d)", idOut, code)
	}
	text, _, _ := runMeshCLI(t, "init", "--data-dir", dir, "-o", "text")
	if !strings.Contains(text, "MESHNODE_JOIN_SECRET=") || !strings.Contains(text, "Open TCP and UDP port 4242") {
		t.Errorf("init text output:\n%s", text)
	}
}

func TestMeshCommandsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"join", "--data-dir", dir}, nil, "no join secret"},
		{[]string{"join", "--data-dir", dir, "--join-secret", "0123456789abcdefgh", "--memory-budget", "lots"}, nil, "--memory-budget"},
		{[]string{"join", "--data-dir", dir, "--join-secret", "0123456789abcdefgh", "--api", "0.0.0.0:7070"}, nil, "loopback"},
		{[]string{"join", "--data-dir", dir, "--join-secret", "short"}, nil, "at least 16"},
		{[]string{"join", "--data-dir", dir, "--bootstrap", "/ip4/1.2.3.4/tcp/1"}, map[string]string{"MESHNODE_JOIN_SECRET": "0123456789abcdefgh"}, "/p2p/"},
		{[]string{"join", "--data-dir", dir}, map[string]string{"MESHNODE_JOIN_SECRET": "0123456789abcdefgh", "MESHNODE_HEARTBEAT": "often"}, "MESHNODE_HEARTBEAT"},
		{[]string{"init", "--mesh", "Bad Name", "--data-dir", dir}, nil, "mesh name"},
		{[]string{"id", "--data-dir", dir + "/nothing"}, nil, "no identity"},
		{[]string{"peers", "-o", "yaml"}, nil, "--output"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		_, errOut, code := runMeshCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}

func TestStatusWithoutNodeSaysSo(t *testing.T) {
	_, errOut, code := runMeshCLI(t, "status", "--api", "127.0.0.1:1")
	if code != 1 || !strings.Contains(errOut, "is `meshnode join` running") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"8GiB": 8 << 30, "512MiB": 512 << 20, "1.5GB": 1.5e9, "1000": 1000, "64 KiB": 64 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "1e30TiB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

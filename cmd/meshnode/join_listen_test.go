package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A second node on one host fails with one clear line naming the address in use and the
// flag to change, for each of its listeners.
func TestJoinAddrInUseNamesTheFlag(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tcpAddr := "/ip4/127.0.0.1/tcp/" + strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		flag, value, addr string
	}{
		{"--data-listen", udp.LocalAddr().String(), udp.LocalAddr().String()},
		{"--api", tcp.Addr().String(), tcp.Addr().String()},
		{"--listen", tcpAddr, tcpAddr},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			args := []string{"join", "--data-dir", t.TempDir(), "--join-secret", "0123456789abcdefgh",
				"--mdns=false", "--dht=false", "--nat=false", "--log-level", "error"}
			// Every listener on a free port but the one under test (--listen adds up, so
			// it is given once).
			addrs := map[string]string{"--listen": "/ip4/127.0.0.1/tcp/0", "--api": "127.0.0.1:0", "--data-listen": "127.0.0.1:0"}
			addrs[tc.flag] = tc.value
			for f, v := range addrs {
				args = append(args, f, v)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel() // a join that started anyway stops
			var stdout, stderr bytes.Buffer
			if code := run(ctx, args, &stdout, &stderr); code == 0 {
				t.Fatalf("join with %s %s in use exited 0", tc.flag, tc.value)
			}
			msg := stderr.String()
			if !strings.Contains(msg, tc.addr+" is already in use") || !strings.Contains(msg, "choose another address with "+tc.flag) {
				t.Errorf("stderr %q: want the address in use and %s named", msg, tc.flag)
			}
			if strings.Contains(msg, "data plane: data plane") {
				t.Errorf("stderr %q stutters", msg)
			}
		})
	}
}

// join --help shows --join-secret's value as a string, not a word from its usage.
func TestJoinHelpJoinSecret(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"join", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("join --help exited %d: %s", code, stderr.String())
	}
	help := stdout.String()
	if !strings.Contains(help, "--join-secret string") || strings.Contains(help, "--join-secret meshnode") {
		t.Errorf("join --help renders --join-secret as:\n%s", grepLine(help, "--join-secret"))
	}
}

func grepLine(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

package node

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A node whose mesh, data-plane or API address another socket holds fails to start with
// an *AddrInUseError naming that listener and address, once.
func TestListenAddrInUse(t *testing.T) {
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
	tcpPort := strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		listener Listener
		addr     string
		set      func(*Config)
	}{
		{ListenerData, udp.LocalAddr().String(), func(c *Config) { c.DataListen = udp.LocalAddr().String() }},
		{ListenerAPI, tcp.Addr().String(), func(c *Config) { c.API = tcp.Addr().String() }},
		{ListenerMesh, "/ip4/127.0.0.1/tcp/" + tcpPort, func(c *Config) { c.Listen = []string{"/ip4/127.0.0.1/tcp/" + tcpPort} }},
	} {
		t.Run(string(tc.listener), func(t *testing.T) {
			cfg := testConfig(t)
			tc.set(&cfg)
			err := startErr(t, cfg)
			var e *AddrInUseError
			if !errors.As(err, &e) || !errors.Is(err, ErrAddrInUse) {
				t.Fatalf("start: %v, want an AddrInUseError", err)
			}
			if e.Listener != tc.listener || e.Addr != tc.addr {
				t.Errorf("error names %s %s, want %s %s", e.Listener, e.Addr, tc.listener, tc.addr)
			}
			if tc.listener != ListenerMesh && !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("%v does not match EADDRINUSE", err)
			}
			if msg := err.Error(); strings.Count(msg, string(tc.listener)+" ") != 1 {
				t.Errorf("%q names the %s more than once", msg, tc.listener)
			}
		})
	}
}

// startErr builds and starts a node with cfg and returns the error of whichever failed.
func startErr(t *testing.T, cfg Config) error {
	n, err := New(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Start(t.Context())
}

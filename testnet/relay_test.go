package testnet

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"
)

// relayRig is two members on plain UDP sockets: a client "a" in region x and a server "b"
// in region y behind a relay, plus "c" (region x) as a second sender.
type relayRig struct {
	net    *Network
	relay  *Relay
	server *net.UDPConn // b's real data-plane socket
	a, c   *net.UDPConn
}

func newRelayRig(t *testing.T, link LinkSpec) *relayRig {
	t.Helper()
	topo := Topology{Nodes: []NodeSpec{{Name: "a", Region: "x"}, {Name: "b", Region: "y"}, {Name: "c", Region: "x"}}}
	if link.Between != nil {
		topo.Links = []LinkSpec{link}
	}
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	rig := &relayRig{net: NewNetwork(topo)}
	t.Cleanup(rig.net.Close)
	rig.server, rig.a, rig.c = listenUDP(t), listenUDP(t), listenUDP(t)
	for name, c := range map[string]*net.UDPConn{"a": rig.a, "b": rig.server, "c": rig.c} {
		if err := rig.net.SetAddr(name, addrOf(c)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRelay(rig.net, "b", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.SetTarget(addrOf(rig.server))
	rig.relay = r
	return rig
}

func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

// sendTo writes n datagrams of size bytes from c to the relay.
func (rig *relayRig) sendTo(t *testing.T, c *net.UDPConn, n, size int) {
	t.Helper()
	buf := make([]byte, size)
	for i := range n {
		buf[0] = byte(i)
		if _, err := c.WriteToUDPAddrPort(buf, rig.relay.Addr()); err != nil {
			t.Fatal(err)
		}
	}
}

// receive reads datagrams from c until none arrives for quiet; it returns how many came,
// their senders and when the last arrived.
func receive(t *testing.T, c *net.UDPConn, quiet time.Duration) (int, map[netip.AddrPort]int, time.Time) {
	t.Helper()
	buf := make([]byte, maxDatagram)
	from := map[netip.AddrPort]int{}
	var last time.Time
	n := 0
	for {
		c.SetReadDeadline(time.Now().Add(quiet))
		_, src, err := c.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, from, last
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		from[src]++
		last = time.Now()
	}
}

func TestRelayAddsLatencyBothWays(t *testing.T) {
	rig := newRelayRig(t, LinkSpec{Between: []string{"x", "y"}, Latency: "30ms", Bandwidth: "unlimited"})
	start := time.Now()
	rig.sendTo(t, rig.a, 1, 100)
	buf := make([]byte, 2048)
	rig.server.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, src, err := rig.server.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if oneWay := time.Since(start); oneWay < 30*time.Millisecond {
		t.Errorf("one-way delay %v, want ≥ 30ms", oneWay)
	}
	if _, err := rig.server.WriteToUDPAddrPort(buf[:n], src); err != nil {
		t.Fatal(err)
	}
	rig.a.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, back, err := rig.a.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 60*time.Millisecond {
		t.Errorf("round trip %v, want ≥ 60ms", rtt)
	}
	if back != rig.relay.Addr() {
		t.Errorf("reply came from %v, want the relay %v", back, rig.relay.Addr())
	}
}

func TestRelayCapsBandwidth(t *testing.T) {
	// 8 Mbit/s = 1 MB/s: 80 datagrams of 1000 bytes take 80ms to serialise.
	rig := newRelayRig(t, LinkSpec{Between: []string{"x", "y"}, Latency: "5ms", Bandwidth: "8Mbit"})
	start := time.Now()
	rig.sendTo(t, rig.a, 80, 1000)
	n, _, last := receive(t, rig.server, 500*time.Millisecond)
	if n != 80 {
		t.Fatalf("received %d of 80 datagrams", n)
	}
	if took := last.Sub(start); took < 85*time.Millisecond {
		t.Errorf("80 kB at 1 MB/s + 5ms arrived in %v, want ≥ 85ms", took)
	}
}

func TestRelayDropsWhenQueueIsFull(t *testing.T) {
	// At 1 MB/s the queue holds 100ms = ~100 datagrams of 1000 bytes.
	rig := newRelayRig(t, LinkSpec{Between: []string{"x", "y"}, Bandwidth: "8Mbit"})
	rig.sendTo(t, rig.a, 400, 1000)
	n, _, _ := receive(t, rig.server, 500*time.Millisecond)
	st := linkStats(rig.net, "a", "b")
	if n > 150 || st.QueueDrops == 0 {
		t.Errorf("received %d of 400 with %d queue drops; want a bounded queue (≤ ~101 datagrams)", n, st.QueueDrops)
	}
}

func TestRelayLoss(t *testing.T) {
	rig := newRelayRig(t, LinkSpec{Between: []string{"x", "y"}, Bandwidth: "unlimited", Latency: "0s", Loss: "50%"})
	rig.sendTo(t, rig.a, 400, 100)
	n, _, _ := receive(t, rig.server, 300*time.Millisecond)
	if n < 120 || n > 280 {
		t.Errorf("received %d of 400 at 50%% loss", n)
	}
	if st := linkStats(rig.net, "a", "b"); int(st.LossDrops)+n != 400 {
		t.Errorf("loss drops %d + received %d ≠ 400", st.LossDrops, n)
	}
}

func TestRelayPartitionAndHeal(t *testing.T) {
	rig := newRelayRig(t, LinkSpec{})
	for _, cut := range [][2]string{{"x", "y"}, {"a", "b"}, {"a", "y"}} {
		if err := rig.net.Partition(cut[0], cut[1]); err != nil {
			t.Fatal(err)
		}
		rig.sendTo(t, rig.a, 10, 100)
		if n, _, _ := receive(t, rig.server, 200*time.Millisecond); n != 0 {
			t.Errorf("partition %v: %d datagrams crossed", cut, n)
		}
		rig.sendTo(t, rig.c, 3, 100) // c is in x too
		n, _, _ := receive(t, rig.server, 200*time.Millisecond)
		if want := map[bool]int{true: 0, false: 3}[cut[0] == "x"]; n != want {
			t.Errorf("partition %v: %d datagrams from c crossed, want %d", cut, n, want)
		}
		if err := rig.net.Heal(cut[0], cut[1]); err != nil {
			t.Fatal(err)
		}
	}
	rig.sendTo(t, rig.a, 10, 100)
	if n, _, _ := receive(t, rig.server, 200*time.Millisecond); n != 10 {
		t.Errorf("after healing %d of 10 datagrams crossed", n)
	}
	if err := rig.net.Partition("a", "nowhere"); !errors.Is(err, ErrUnknownName) {
		t.Errorf("partition with an unknown name: %v", err)
	}
}

func TestRelayKeepsFlowsApartAndDropsStrangers(t *testing.T) {
	rig := newRelayRig(t, LinkSpec{})
	rig.sendTo(t, rig.a, 5, 100)
	rig.sendTo(t, rig.c, 5, 100)
	stranger := listenUDP(t)
	rig.sendTo(t, stranger, 5, 100)
	n, from, _ := receive(t, rig.server, 200*time.Millisecond)
	if n != 10 || len(from) != 2 {
		t.Errorf("received %d datagrams from %d sources; want 10 from 2 (one upstream socket per sender)", n, len(from))
	}
	if got := rig.relay.Unknown(); got != 5 {
		t.Errorf("Unknown() = %d, want 5", got)
	}
}

func TestRelayCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	topo := Topology{Nodes: []NodeSpec{{Name: "a", Region: "x"}, {Name: "b", Region: "y"}}}
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	nw := NewNetwork(topo)
	server, client := listenUDP(t), listenUDP(t)
	nw.SetAddr("a", addrOf(client))
	nw.SetAddr("b", addrOf(server))
	r, err := NewRelay(nw, "b", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.SetTarget(addrOf(server))
	rig := &relayRig{net: nw, relay: r, server: server}
	rig.sendTo(t, client, 20, 500)
	if n, src, _ := receive(t, server, 200*time.Millisecond); n != 20 {
		t.Fatalf("received %d of 20", n)
	} else {
		for a := range src {
			server.WriteToUDPAddrPort([]byte("reply"), a)
		}
	}
	if n, _, _ := receive(t, client, 200*time.Millisecond); n != 1 {
		t.Fatalf("client got %d replies, want 1", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	nw.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func linkStats(nw *Network, from, to string) LinkStats {
	for _, s := range nw.Stats() {
		if s.From == from && s.To == to {
			return s
		}
	}
	return LinkStats{}
}

package node

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/internal/testutil"
)

// delayRelay forwards UDP datagrams to a target, delaying each by `delay` in both
// directions: a stand-in for the testnet's WAN relay in front of a data-plane port.
type delayRelay struct {
	conn   *net.UDPConn
	target atomic.Pointer[net.UDPAddr]
	delay  time.Duration

	mu  sync.Mutex
	ups map[string]*net.UDPConn // client address → its upstream socket
}

func startDelayRelay(t *testing.T, delay time.Duration) *delayRelay {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &delayRelay{conn: conn, delay: delay, ups: map[string]*net.UDPConn{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		conn.Close()
		r.mu.Lock()
		for _, u := range r.ups {
			u.Close()
		}
		r.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() { r.serve(&wg) })
	return r
}

func (r *delayRelay) serve(wg *sync.WaitGroup) {
	buf := make([]byte, 64<<10)
	for {
		n, client, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		up := r.upstream(client, wg)
		if up == nil {
			continue
		}
		b := append([]byte(nil), buf[:n]...)
		time.AfterFunc(r.delay, func() { _, _ = up.Write(b) })
	}
}

func (r *delayRelay) upstream(client *net.UDPAddr, wg *sync.WaitGroup) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u := r.ups[client.String()]; u != nil {
		return u
	}
	target := r.target.Load()
	if target == nil {
		return nil
	}
	u, err := net.DialUDP("udp", nil, target)
	if err != nil {
		return nil
	}
	r.ups[client.String()] = u
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := u.Read(buf)
			if err != nil {
				return
			}
			b := append([]byte(nil), buf[:n]...)
			time.AfterFunc(r.delay, func() { _, _ = r.conn.WriteToUDP(b, client) })
		}
	})
	return u
}

// TestLinkProbesMeasureTheDataPlanePath: each node's data port sits behind a relay that
// adds 15 ms each way, and each announces its relay's address, as on a testnet. Whichever
// node dialled, the data-plane connection crosses one relay, so probes over it see at
// least 30 ms, while the libp2p probe's direct path sees loopback; the peer table (and
// GET /v1/peers) shows the data plane's measurement.
func TestLinkProbesMeasureTheDataPlanePath(t *testing.T) {
	const delay = 15 * time.Millisecond
	var nodes []*Node
	for i := range 2 {
		relay := startDelayRelay(t, delay)
		var boot []string
		if i > 0 {
			boot = nodes[0].Status().Addrs
		}
		cfg := testConfig(t, boot...)
		cfg.Consensus.Disabled = true
		cfg.DataAdvertise = relay.conn.LocalAddr().String()
		n := startNode(t, cfg)
		target, err := net.ResolveUDPAddr("udp", n.DataPlane().Addr())
		if err != nil {
			t.Fatal(err)
		}
		relay.target.Store(target)
		nodes = append(nodes, n)
	}
	a, b := nodes[0], nodes[1]

	view := func(from, to *Node) *api.Peer {
		for _, v := range from.Peers() {
			if v.ID == to.ID().String() {
				return &v
			}
		}
		return nil
	}
	testutil.WaitFor(t, 90*time.Second, "data-plane links measured both ways", func() bool {
		for _, pair := range [][2]*Node{{a, b}, {b, a}} {
			v := view(pair[0], pair[1])
			if v == nil || v.LinkSource != "dataplane" || v.RTTMs == nil || v.BandwidthMbps == nil {
				return false
			}
		}
		return true
	})
	for _, pair := range [][2]*Node{{a, b}, {b, a}} {
		var served []api.Peer
		getJSON(t, pair[0], "/v1/peers", &served)
		if len(served) != 1 || served[0].LinkSource != "dataplane" || served[0].RTTMs == nil {
			t.Fatalf("GET /v1/peers: %+v", served)
		}
		if want := pair[1].cfg.DataAdvertise; served[0].DataAddr != want {
			t.Errorf("GET /v1/peers: data_addr %q, want the relay the peer advertises, %s", served[0].DataAddr, want)
		}
		if rtt := *served[0].RTTMs; rtt < 2*float64(delay.Milliseconds()) {
			t.Errorf("measured %.2f ms over the data plane; a relay adds %v each way", rtt, delay)
		}
		for _, p := range pair[0].Mesh().Peers() {
			for _, l := range p.Links {
				t.Logf("%s: rtt %v, bandwidth %.1f Mbit/s, err %q", l.Source, l.RTT, l.BandwidthBps*8/1e6, l.Err)
			}
		}
	}
}

// TestLinkProbesFallBackToLibp2pStreams: two nodes whose data ports nothing reaches (each
// advertises a UDP address that swallows every packet, as a NAT with no mapping does) and
// that hold no QUIC connection with each other: the probe finds no address, so tensors and
// probes ride libp2p streams, and GET /v1/peers says so with the bytes that path carried.
func TestLinkProbesFallBackToLibp2pStreams(t *testing.T) {
	var nodes []*Node
	for i := range 2 {
		hole, err := net.ListenPacket("udp", "127.0.0.1:0") // never read: a black hole
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hole.Close() })
		var boot []string
		if i > 0 {
			boot = nodes[0].Status().Addrs
		}
		cfg := testConfig(t, boot...)
		cfg.Consensus.Disabled = true
		cfg.DataAdvertise = hole.LocalAddr().String()
		nodes = append(nodes, startNode(t, cfg))
	}
	a, b := nodes[0], nodes[1]
	testutil.WaitFor(t, 90*time.Second, "links measured over libp2p streams both ways", func() bool {
		for _, pair := range [][2]*Node{{a, b}, {b, a}} {
			var served []api.Peer
			getJSON(t, pair[0], "/v1/peers", &served)
			if len(served) != 1 || served[0].DataAddr != "libp2p" || served[0].Path != "libp2p" ||
				served[0].RTTMs == nil || served[0].PathBytes["libp2p"] == 0 {
				return false
			}
		}
		return true
	})
	if a.DataPlane().Connected(b.ID().String()) || b.DataPlane().Connected(a.ID().String()) {
		t.Fatal("a QUIC connection exists: the black holes were reached")
	}
}

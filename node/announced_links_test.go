package node

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/mesh"
)

// A peer that announces a data-plane address is announced with the data plane's
// measurement only: before that probe answers, libp2p's reading (loopback on a testnet,
// whatever path libp2p found elsewhere) is not the tensors' path and is left out, so the
// planner does not take an emulated WAN for a LAN. A peer without a data plane keeps its
// libp2p link.
func TestAnnouncedLinksAreTheDataPlanesForDataPlanePeers(t *testing.T) {
	withData := &mesh.Profile{DataAddr: "127.0.0.1:4243"}
	lan := mesh.Link{RTT: 100 * time.Microsecond, BandwidthBps: 100e6, Source: mesh.LinkLibp2p}
	wan := mesh.Link{RTT: 45 * time.Millisecond, BandwidthBps: 2e6, Source: mesh.LinkDataPlane}
	peers := []mesh.PeerInfo{
		{ID: peer.ID("pending"), Profile: withData, Link: lan},
		{ID: peer.ID("probed"), Profile: withData, Link: wan},
		{ID: peer.ID("nodata"), Profile: &mesh.Profile{}, Link: lan},
	}
	got := announcedLinks(peers)
	want := map[string]float64{peer.ID("probed").String(): 0.045, peer.ID("nodata").String(): 0.0001}
	if len(got) != len(want) {
		t.Fatalf("announced %+v, want links to probed and nodata only", got)
	}
	for _, l := range got {
		if rtt, ok := want[l.Peer]; !ok || l.RTTSeconds != rtt {
			t.Errorf("announced %+v, want rtt %v for %s", l, rtt, l.Peer)
		}
	}
}

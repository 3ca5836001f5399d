package mesh

import (
	"testing"
	"time"
)

func TestPeerTablePrefersDataPlaneLink(t *testing.T) {
	tab := newPeerTable(time.Second, 3*time.Second, time.Minute)
	p := testPeerID(t)
	tab.observe(p, &heartbeat{ID: p.String(), Mesh: "m", Seq: 1})
	at := time.Unix(2000, 0)
	link := func() Link { return tab.snapshot()[0].Link }

	tab.setLink(p, Link{RTT: time.Millisecond, BandwidthBps: 1e9, MeasuredAt: at})
	if l := link(); l.Source != LinkLibp2p || l.BandwidthBps != 1e9 {
		t.Fatalf("only a libp2p measurement: preferred %+v", l)
	}
	// A failed data-plane probe with no numbers yet does not hide the libp2p ones.
	tab.setLink(p, Link{MeasuredAt: at, Err: "timeout", Source: LinkDataPlane})
	if l := link(); l.Source != LinkLibp2p {
		t.Fatalf("data-plane failure without numbers preferred: %+v", l)
	}
	tab.setLink(p, Link{RTT: 40 * time.Millisecond, BandwidthBps: 1e6, MeasuredAt: at, Source: LinkDataPlane})
	if l := link(); l.Source != LinkDataPlane || l.BandwidthBps != 1e6 {
		t.Fatalf("data-plane measurement not preferred: %+v", l)
	}
	// A later libp2p probe does not displace it.
	tab.setLink(p, Link{RTT: time.Millisecond, BandwidthBps: 2e9, MeasuredAt: at.Add(time.Minute)})
	if l := link(); l.Source != LinkDataPlane {
		t.Fatalf("libp2p measurement displaced the data plane's: %+v", l)
	}
	if ls := tab.snapshot()[0].Links; len(ls) != 2 || ls[0].Source != LinkDataPlane || ls[1].Source != LinkLibp2p {
		t.Fatalf("Links = %+v, want the data plane's then libp2p's", ls)
	}
}

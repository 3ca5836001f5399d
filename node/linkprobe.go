package node

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/dataplane"
)

// linkProber measures the link to every live peer that announces a data-plane address,
// over the data plane itself (so a WAN relay in front of a peer's data port is what gets
// measured), and records the result in the mesh's peer table as a LinkDataPlane link,
// which the table prefers. A peer is probed when it joins (or announces a new address)
// and then every Config.Probe.Interval (negative: on join only); one probe runs at a
// time. The probe sizes and timeout are Config.Probe's.
type linkProber struct {
	n      *Node
	cfg    dataplane.ProbeConfig
	every  time.Duration // ≤ 0: on join only
	check  time.Duration // how often the peer table is looked at
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	probed map[peer.ID]probeMark // live peers and when they were last probed
}

type probeMark struct {
	addr string
	at   time.Time
}

func newLinkProber(n *Node) *linkProber {
	p := n.cfg.Probe
	every := p.Interval
	if every == 0 {
		every = 5 * time.Minute
	}
	check := n.cfg.Heartbeat
	if check <= 0 {
		check = 2 * time.Second
	}
	return &linkProber{n: n, every: every, check: check, probed: map[peer.ID]probeMark{},
		cfg: dataplane.ProbeConfig{Pings: p.Pings, MinBytes: p.MinBytes, MaxBytes: p.MaxBytes, Target: p.Target, Timeout: p.Timeout}}
}

func (l *linkProber) Name() string { return "linkprobe" }

func (l *linkProber) Start(context.Context) error {
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return nil
}

// Close stops probing, waiting for a probe in progress to end.
func (l *linkProber) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

func (l *linkProber) loop() {
	defer l.wg.Done()
	t := time.NewTicker(l.check)
	defer t.Stop()
	for {
		for _, pi := range l.due() {
			l.probe(pi)
		}
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// due returns the live peers with a data-plane address that need a probe, forgetting
// peers that are no longer alive (so that their return counts as a join).
func (l *linkProber) due() []mesh.PeerInfo {
	var out []mesh.PeerInfo
	live := map[peer.ID]bool{}
	now := time.Now()
	for _, pi := range l.n.mesh.Peers() {
		if pi.State != mesh.StateAlive || pi.Profile == nil || pi.Profile.DataAddr == "" {
			continue
		}
		live[pi.ID] = true
		m, ok := l.probed[pi.ID]
		if !ok || m.addr != pi.Profile.DataAddr || (l.every > 0 && now.Sub(m.at) >= l.every) {
			out = append(out, pi)
		}
	}
	for id := range l.probed {
		if !live[id] {
			delete(l.probed, id)
		}
	}
	return out
}

func (l *linkProber) probe(pi mesh.PeerInfo) {
	dp := l.n.DataPlane()
	if dp == nil || l.ctx.Err() != nil {
		return
	}
	addr := pi.Profile.DataAddr
	dp.SetPeerAddr(pi.ID.String(), addr)
	rtt, bw, err := dp.Probe(l.ctx, pi.ID.String(), l.cfg)
	if l.ctx.Err() != nil {
		return
	}
	link := mesh.Link{RTT: rtt, BandwidthBps: bw / 8, MeasuredAt: time.Now(), Source: mesh.LinkDataPlane}
	if err != nil {
		l.n.log.Info("data-plane link probe failed", "peer", pi.ID, "addr", addr, "err", err)
		link = mesh.Link{MeasuredAt: link.MeasuredAt, Err: err.Error(), Source: mesh.LinkDataPlane}
		for _, old := range pi.Links {
			if old.Source == mesh.LinkDataPlane {
				link.RTT, link.BandwidthBps = old.RTT, old.BandwidthBps // keep the last good numbers
			}
		}
	} else {
		l.n.log.Debug("data-plane link probed", "peer", pi.ID, "addr", addr, "rtt", rtt, "bandwidth_mbps", bw/1e6)
	}
	l.n.mesh.SetLink(pi.ID, link)
	l.probed[pi.ID] = probeMark{addr: addr, at: link.MeasuredAt}
}

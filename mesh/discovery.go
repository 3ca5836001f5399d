package mesh

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/peer"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
)

// discoveryLoop connects to the bootstrap peers, then every DiscoveryInterval retries the
// ones not connected and advertises and looks up the mesh's DHT rendezvous.
func (m *Mesh) discoveryLoop(ctx context.Context) {
	var rd *drouting.RoutingDiscovery
	if m.kad != nil {
		rd = drouting.NewRoutingDiscovery(m.kad)
	}
	t := time.NewTicker(m.cfg.discoveryInterval())
	defer t.Stop()
	for {
		for _, bp := range m.cfg.Bootstrap {
			m.connectAsync(bp)
		}
		if rd != nil {
			m.rendezvous(ctx, rd)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rendezvous advertises this node under the mesh name in the DHT and dials the members
// found there. It needs at least one DHT peer; until then it does nothing.
func (m *Mesh) rendezvous(ctx context.Context, rd *drouting.RoutingDiscovery) {
	if m.kad.RoutingTable().Size() == 0 {
		return
	}
	ns := rendezvous(m.cfg.meshName())
	ctx, cancel := context.WithTimeout(ctx, m.cfg.discoveryInterval())
	defer cancel()
	if _, err := rd.Advertise(ctx, ns, discovery.TTL(3*m.cfg.discoveryInterval())); err != nil {
		m.log.Debug("DHT advertise", "err", err)
	}
	found, err := rd.FindPeers(ctx, ns)
	if err != nil {
		m.log.Debug("DHT find peers", "err", err)
		return
	}
	for pi := range found {
		m.connectAsync(pi)
	}
}

// maxDialMemory is the size past which connectAsync drops the dial times that no longer
// limit anything, so that announcements of ever new peer IDs cannot grow the map.
const maxDialMemory = 1024

// connectAsync dials pi in the background unless it is this node, already connected,
// refused by the gater, or was dialled less than a second ago.
func (m *Mesh) connectAsync(pi peer.AddrInfo) {
	if pi.ID == m.host.ID() || pi.ID == "" || !m.gater.permits(pi.ID) ||
		m.connected(pi.ID) {
		return
	}
	m.dialMu.Lock()
	if last, ok := m.lastDial[pi.ID]; ok && time.Since(last) < time.Second {
		m.dialMu.Unlock()
		return
	}
	if len(m.lastDial) >= maxDialMemory {
		for id, last := range m.lastDial {
			if time.Since(last) >= time.Second {
				delete(m.lastDial, id) // no longer limits anything
			}
		}
	}
	m.lastDial[pi.ID] = time.Now()
	m.dialMu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
		defer cancel()
		if err := m.host.Connect(ctx, pi); err != nil {
			m.log.Debug("connect", "peer", pi.ID, "err", err)
		}
	}()
}

// mdnsNotifee dials peers announced on the local network.
type mdnsNotifee struct{ m *Mesh }

func (n mdnsNotifee) HandlePeerFound(pi peer.AddrInfo) { n.m.connectAsync(pi) }

// queueProbe asks the probe loop to measure the link to p soon.
func (m *Mesh) queueProbe(p peer.ID) {
	select {
	case m.probeQ <- p:
	default: // the queue is full; the periodic round will get to p
	}
}

// probeLoop measures one link at a time (concurrent probes would share, and so
// under-measure, this node's bandwidth): peers as they join, and every live peer each
// probe interval.
func (m *Mesh) probeLoop(ctx context.Context) {
	var tick <-chan time.Time
	if iv := m.cfg.Probe.interval(); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-m.probeQ:
			m.probeAndRecord(ctx, p)
		case <-tick:
			for _, pi := range m.table.snapshot() {
				if pi.State == StateAlive {
					m.queueProbe(pi.ID)
				}
			}
		}
	}
}

func (m *Mesh) probeAndRecord(ctx context.Context, p peer.ID) {
	if st, ok := m.table.state(p); !ok || st == StateDead {
		return
	}
	link, err := m.probePeer(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errProbeProtocol) {
			m.malformed(p, string(ProtocolProbe), err)
		}
		m.log.Info("link probe failed", "peer", p, "err", err)
		link = Link{MeasuredAt: time.Now(), Err: err.Error()}
		if old, ok := m.peerLink(p); ok {
			link.RTT, link.BandwidthBps = old.RTT, old.BandwidthBps // keep the last good numbers
		}
	} else {
		m.log.Debug("link probed", "peer", p, "rtt", link.RTT, "bandwidth_MBps", link.BandwidthBps/1e6)
	}
	m.table.setLink(p, link)
}

func (m *Mesh) peerLink(p peer.ID) (Link, bool) {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	if e, ok := m.table.peers[p]; ok {
		return e.link, true
	}
	return Link{}, false
}

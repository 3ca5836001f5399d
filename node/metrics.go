package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/mesh"
)

// meshCollector exports the peer table and the mesh's counters at scrape time.
type meshCollector struct {
	m                                           *mesh.Mesh
	peers, rtt, bandwidth, gflops, budget       *prometheus.Desc
	authFailures, refused, malformed, connected *prometheus.Desc
	authRetries, unadmittedSigners, admitted    *prometheus.Desc
	relayRefused, reservations                  *prometheus.Desc
}

func newMeshCollector(m *mesh.Mesh) *meshCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("meshnode_"+name, help, labels, nil)
	}
	return &meshCollector{
		m:            m,
		peers:        d("peers", "Members in the peer table by state.", "state"),
		rtt:          d("peer_rtt_seconds", "Median probe round-trip time to a peer.", "peer"),
		bandwidth:    d("peer_bandwidth_bytes_per_second", "Probed throughput towards a peer.", "peer"),
		gflops:       d("gemm_gflops", "Measured GEMM rate of this node (after slowdown)."),
		budget:       d("memory_budget_bytes", "Memory this node offers to training."),
		authFailures: d("auth_failures_total", "Peers refused admission."),
		refused:      d("refused_streams_total", "Streams reset because their peer was not admitted."),
		malformed:    d("malformed_messages_total", "Malformed messages from admitted peers."),
		connected:    d("connected_peers", "Peers with an open connection, admitted or not."),
		authRetries:  d("auth_retries_total", "Admission exchanges started again because the previous one timed out."),
		unadmittedSigners: d("unadmitted_signers_total",
			"Heartbeats dropped because this node had not admitted their signer itself (relayed keys: a Sybil attempt or a peer not yet admitted)."),
		admitted:     d("admitted_peers", "Connected peers this node admitted."),
		relayRefused: d("relay_refused_total", "Relay reservations and circuits refused because an end was not an admitted member."),
		reservations: d("relay_reservations", "Relay reservations this node holds (behind a NAT)."),
	}
}

func (c *meshCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.peers, c.rtt, c.bandwidth, c.gflops, c.budget, c.authFailures, c.refused,
		c.malformed, c.connected, c.authRetries, c.unadmittedSigners, c.admitted, c.relayRefused, c.reservations} {
		ch <- d
	}
}

func (c *meshCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[mesh.PeerState]int{mesh.StateAlive: 0, mesh.StateSuspect: 0, mesh.StateDead: 0}
	for _, p := range c.m.Peers() {
		counts[p.State]++
		if p.Link.RTT > 0 {
			ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, p.Link.RTT.Seconds(), p.ID.String())
		}
		if p.Link.BandwidthBps > 0 {
			ch <- prometheus.MustNewConstMetric(c.bandwidth, prometheus.GaugeValue, p.Link.BandwidthBps, p.ID.String())
		}
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, float64(n), string(s))
	}
	if p := c.m.Profile(); p != nil {
		ch <- prometheus.MustNewConstMetric(c.gflops, prometheus.GaugeValue, p.GemmGFLOPS)
		ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, float64(p.MemoryBudgetBytes))
	}
	st := c.m.Stats()
	ch <- prometheus.MustNewConstMetric(c.authFailures, prometheus.CounterValue, float64(st.AuthFailures))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.RefusedStreams))
	ch <- prometheus.MustNewConstMetric(c.malformed, prometheus.CounterValue, float64(st.Malformed))
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, float64(st.Connected))
	ch <- prometheus.MustNewConstMetric(c.authRetries, prometheus.CounterValue, float64(st.AuthRetries))
	ch <- prometheus.MustNewConstMetric(c.unadmittedSigners, prometheus.CounterValue, float64(st.UnadmittedSigners))
	ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.GaugeValue, float64(st.Admitted))
	ch <- prometheus.MustNewConstMetric(c.relayRefused, prometheus.CounterValue, float64(st.RelayRefused))
	ch <- prometheus.MustNewConstMetric(c.reservations, prometheus.GaugeValue, float64(st.Reservations))
}

package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/mesh/dataplane"
	"github.com/meshnode/meshnode/mesh/frame"
)

// frameKinds and frameCodecs name the kind and codec labels of the data-plane metrics.
var (
	frameKinds = map[frame.Kind]string{frame.KindActivation: "activation", frame.KindGradient: "gradient",
		frame.KindReduce: "reduce", frame.KindScalar: "scalar", frame.KindProbe: "probe"}
	frameCodecs = map[frame.Codec]string{frame.CodecNone: "none", frame.CodecFP16: "fp16",
		frame.CodecInt8: "int8", frame.CodecTopK: "topk"}
)

// otherPeer is the peer label of traffic with nodes no longer in the peer table, so that
// the peer label stays bounded by the current members while totals stay whole.
const otherPeer = "other"

// dataPlaneCollector exports the data plane's traffic counters at scrape time, by peer,
// frame kind and codec.
type dataPlaneCollector struct {
	n                                    *Node
	sentBytes, recvBytes, sent, received *prometheus.Desc
	bad, inflight, pathBytes, expired    *prometheus.Desc
	misbehaved, resent                   *prometheus.Desc
}

func newDataPlaneCollector(n *Node) *dataPlaneCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("meshnode_dataplane_"+name, help, labels, nil)
	}
	l := []string{"peer", "kind", "codec"}
	return &dataPlaneCollector{
		n:         n,
		sentBytes: d("sent_bytes_total", "Payload bytes of frames handed to QUIC for a peer.", l...),
		recvBytes: d("received_bytes_total", "Payload bytes of valid frames received from a peer.", l...),
		sent:      d("sent_frames_total", "Frames handed to QUIC for a peer.", l...),
		received:  d("received_frames_total", "Valid frames received from a peer.", l...),
		bad:       d("bad_frames_total", "Frames from peers that failed validation and reset their stream."),
		inflight:  d("inflight_bytes", "Payload bytes of frames being received now (bounded by the in-flight budget)."),
		expired:   d("expired_frames_total", "Frames of jobs this node does not run, dropped after waiting the data plane's UnknownJobTTL."),
		misbehaved: d("misbehaved_total",
			"Peers disconnected because the engine caught them sending frames the protocol never sends (wrong length, dtype or codec)."),
		resent: d("resent_frames_total",
			"Frames sent again to a peer's new process after the connection to its old one ended in a stateless reset (it restarted in place)."),
		pathBytes: d("path_bytes_total", "Payload bytes exchanged with a peer (both directions) by kind of path: direct, inbound, hole-punched, relayed, libp2p.", "peer", "path"),
	}
}

func (c *dataPlaneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sentBytes, c.recvBytes, c.sent, c.received, c.bad, c.inflight, c.pathBytes, c.expired, c.misbehaved, c.resent} {
		ch <- d
	}
}

type flowLabels struct{ peer, kind, codec string }

func (c *dataPlaneCollector) Collect(ch chan<- prometheus.Metric) {
	dp := c.n.DataPlane()
	if dp == nil {
		return
	}
	members := map[string]bool{}
	for _, p := range c.n.mesh.Peers() {
		members[p.ID.String()] = true
	}
	st := dp.Stats()
	sent, recv := map[flowLabels]dataplane.Traffic{}, map[flowLabels]dataplane.Traffic{}
	for _, f := range st.Flows {
		k := flowLabels{otherPeer, label(frameKinds, f.Kind), label(frameCodecs, f.Codec)}
		if members[f.Peer] {
			k.peer = f.Peer
		}
		m := recv
		if f.Sent {
			m = sent
		}
		t := m[k]
		t.Frames, t.Bytes = t.Frames+f.Frames, t.Bytes+f.Bytes
		m[k] = t
	}
	emitTraffic(ch, sent, c.sentBytes, c.sent)
	emitTraffic(ch, recv, c.recvBytes, c.received)
	ch <- prometheus.MustNewConstMetric(c.bad, prometheus.CounterValue, float64(st.TotalBadFrames()))
	gauge(ch, c.inflight, float64(st.InFlightBytes))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(st.ExpiredFrames))
	ch <- prometheus.MustNewConstMetric(c.misbehaved, prometheus.CounterValue, float64(total(st.Misbehaved)))
	ch <- prometheus.MustNewConstMetric(c.resent, prometheus.CounterValue, float64(total(st.ResentFrames)))
	paths := map[[2]string]int64{}
	for p, kinds := range st.Paths {
		if !members[p] {
			p = otherPeer
		}
		for kind, t := range kinds {
			paths[[2]string{p, kind}] += t.Bytes
		}
	}
	for k, b := range paths {
		ch <- prometheus.MustNewConstMetric(c.pathBytes, prometheus.CounterValue, float64(b), k[0], k[1])
	}
}

// total is the sum of a per-peer count.
func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func emitTraffic(ch chan<- prometheus.Metric, m map[flowLabels]dataplane.Traffic, bytes, frames *prometheus.Desc) {
	for k, t := range m {
		ch <- prometheus.MustNewConstMetric(bytes, prometheus.CounterValue, float64(t.Bytes), k.peer, k.kind, k.codec)
		ch <- prometheus.MustNewConstMetric(frames, prometheus.CounterValue, float64(t.Frames), k.peer, k.kind, k.codec)
	}
}

// label names v by names, or by its number when it has no name.
func label[K ~uint8](names map[K]string, v K) string {
	if s, ok := names[v]; ok {
		return s
	}
	return strconv.Itoa(int(v))
}

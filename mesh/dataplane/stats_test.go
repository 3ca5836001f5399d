package dataplane

import (
	"testing"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Stats splits traffic by codec in Flows and sums the codecs in Sent and Received.
func TestStatsFlowsByCodec(t *testing.T) {
	d := &Plane{inflight: newBudget(1 << 20), box: frame.NewMailbox(0)}
	d.stats.init()
	send := func(dir direction, peer string, kind frame.Kind, codec frame.Codec, n int) {
		d.stats.count(dir, peer, PathDirect, &frame.Frame{Kind: kind, Codec: codec, Payload: make([]byte, n)})
	}
	send(dirSent, "b", frame.KindReduce, frame.CodecInt8, 10)
	send(dirSent, "b", frame.KindReduce, frame.CodecInt8, 5)
	send(dirSent, "b", frame.KindReduce, frame.CodecNone, 40)
	send(dirReceived, "b", frame.KindActivation, frame.CodecNone, 7)
	st := d.Stats()
	if got := st.Sent["b"][frame.KindReduce]; got.Frames != 3 || got.Bytes != 55 {
		t.Errorf("sent reduce to b = %+v, want 3 frames, 55 bytes", got)
	}
	want := map[Flow]bool{
		{Sent: true, Peer: "b", Kind: frame.KindReduce, Codec: frame.CodecInt8, Traffic: Traffic{2, 15}}:     true,
		{Sent: true, Peer: "b", Kind: frame.KindReduce, Codec: frame.CodecNone, Traffic: Traffic{1, 40}}:     true,
		{Sent: false, Peer: "b", Kind: frame.KindActivation, Codec: frame.CodecNone, Traffic: Traffic{1, 7}}: true,
	}
	if len(st.Flows) != len(want) {
		t.Fatalf("flows %+v, want %d of them", st.Flows, len(want))
	}
	for _, f := range st.Flows {
		if !want[f] {
			t.Errorf("unexpected flow %+v", f)
		}
	}
}

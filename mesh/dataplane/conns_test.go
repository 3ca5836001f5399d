package dataplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// A peer that opens connection after connection (each could hold MaxIncomingStreams
// frames in flight) keeps at most MaxConnsPerPeer of them: each one more closes its oldest
// with ConnTooMany, and the newest still carries frames.
func TestDataPlaneLimitsConnectionsPerPeer(t *testing.T) {
	cfg := dpTestConfig(t, 1)
	cfg.MaxConnsPerPeer = 2
	d := startDataPlane(t, cfg)
	const dials = 6
	var conns []*quic.Conn
	var rawID string
	for i := range dials {
		qc, id := dialRaw(t, d, 99)
		conns, rawID = append(conns, qc), id
		// The data plane adopts a connection after its handshake; wait for it, so that the
		// order of adoption is the order of dialling.
		testutil.WaitFor(t, 10*time.Second, "connection adopted", func() bool {
			return d.openConns(rawID) == min(i+1, cfg.MaxConnsPerPeer) && d.Stats().EvictedConns[rawID] == int64(max(0, i+1-cfg.MaxConnsPerPeer))
		})
	}
	for i, qc := range conns[:dials-cfg.MaxConnsPerPeer] {
		testutil.WaitFor(t, 10*time.Second, "an old connection closed", func() bool { return qc.Context().Err() != nil })
		var appErr *quic.ApplicationError
		if err := context.Cause(qc.Context()); !errors.As(err, &appErr) || appErr.ErrorCode != ConnTooMany {
			t.Errorf("connection %d ended with %v, want ConnTooMany", i, err)
		}
	}
	for _, qc := range conns[dials-cfg.MaxConnsPerPeer:] {
		if qc.Context().Err() != nil {
			t.Fatalf("one of the newest connections was closed: %v", context.Cause(qc.Context()))
		}
	}
	newest := conns[dials-1]
	f := dpTestFrame(frame.KindScalar, 1, 0, []byte("still works"))
	b, err := frame.Append(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	rawWrite(t, newest, b, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := d.Recv(ctx, rawID, f.Key())
	if err != nil || string(got.Payload) != "still works" {
		t.Fatalf("frame on the newest connection: %v", err)
	}
}

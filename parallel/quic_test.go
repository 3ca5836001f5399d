package parallel

import (
	"context"
	"math"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/dataplane"
	"github.com/meshnode/meshnode/mesh/frame"
)

// quicPlanes starts n QUIC data planes on loopback that know each other's addresses.
func quicPlanes(t *testing.T, n int) []*dataplane.Plane {
	t.Helper()
	planes := make([]*dataplane.Plane, n)
	for i := range planes {
		key, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := dataplane.DefaultConfig()
		cfg.ListenAddr, cfg.Identity = "127.0.0.1:0", key
		p, err := dataplane.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		planes[i] = p
	}
	for _, p := range planes {
		for _, q := range planes {
			if p != q {
				p.SetPeerAddr(q.Self(), q.Addr())
			}
		}
	}
	return planes
}

// TestPipelineOverQUICMatchesSingleProcess: the same split runs over real QUIC data planes
// on loopback (TLS bound to libp2p identities) with the single-process losses.
func TestPipelineOverQUICMatchesSingleProcess(t *testing.T) {
	const steps = 20
	cfg := pipelineConfig(steps)
	want := singleProcessLosses(t, cfg.Train)
	for _, c := range []struct {
		sched jobspec.Schedule
		S     int
	}{{jobspec.Schedule1F1B, 2}, {jobspec.ScheduleGPipe, 3}, {jobspec.Schedule1F1B, 4}} {
		planes := quicPlanes(t, c.S)
		names := make([]string, c.S)
		byName := map[string]Transport{}
		for i, p := range planes {
			names[i] = p.Self()
			byName[p.Self()] = p
		}
		cfg.Schedule = c.sched
		run, err := NewLocalRun(cfg, EvenPlan(cfg.Train.Model.NumLayers(), names), testData(), func(n string) Transport { return byName[n] })
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < steps; i++ {
			got, err := run.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rel := math.Abs(got-want[i]) / want[i]; rel > 1e-5 {
				t.Fatalf("%s, %d stages over QUIC, step %d: loss %v, single process %v", c.sched, c.S, i+1, got, want[i])
			}
		}
		var sent int64
		for _, p := range planes {
			sent += p.Stats().SentBytes(frame.KindActivation)
		}
		if sent == 0 {
			t.Fatal("no activation crossed the data planes")
		}
	}
}

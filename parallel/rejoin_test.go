package parallel

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// rejoinRun is three one-stage DiLoCo replicas a, b, c on one in-memory network: c trains
// the first outer period, dies (a and b retire it) and the survivors train on; when rejoin
// is set, a fresh worker of c (a restarted node: nothing of its state left) is readmitted
// at step 6, copies the state from a live replica and trains to the end beside them.
// It returns the final workers (c's fresh one last, when it rejoined).
func rejoinRun(t *testing.T, mode jobspec.Sync, rejoin bool) []*Worker {
	t.Helper()
	const steps = 24
	cfg, plan := quorumConfig(steps, 3, mode)
	cfg.Sync.OuterLR, cfg.Sync.OuterMomentum = 0.7, 0.9 // a copy without the momentum forks
	cfg.Grace = 2 * time.Second
	net := NewInMemory(planNodes(plan)...)
	t.Cleanup(net.Close)
	build := func(id string) *Worker {
		w, err := NewWorker(cfg, plan, id, net.Peer(id), testData())
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	a, b, c := build("a"), build("b"), build("c")
	stepWorkers(t, []*Worker{a, b, c}, 3)
	a.Retire("c")
	b.Retire("c")
	stepWorkers(t, []*Worker{a, b}, 6) // c is dead
	if !rejoin {
		stepWorkers(t, []*Worker{a, b}, steps)
		return []*Worker{a, b}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Readmit(ctx, "c")
	b.Readmit(ctx, "c")
	c2 := build("c")
	c2.Retire() // nothing: the fresh worker sees a and b alive
	var wg sync.WaitGroup
	var joinErr error
	var st CopyStats
	wg.Add(1)
	go func() {
		defer wg.Done()
		st, joinErr = c2.JoinFrom(ctx, []string{"a"})
		if joinErr == nil {
			for c2.StepsDone() < steps && joinErr == nil {
				_, joinErr = c2.Step(ctx)
			}
		}
	}()
	stepWorkers(t, []*Worker{a, b}, steps)
	wg.Wait()
	if joinErr != nil {
		t.Fatalf("the rejoining c: %v", joinErr)
	}
	if st.Peer != "a" || st.Step < 6 || (mode == jobspec.SyncDiLoCo && st.Step%3 != 0) || st.Bytes <= 0 {
		t.Fatalf("copy %+v: want one from the live a at an outer-step boundary", st)
	}
	served := a.CopiesServed()
	if len(served) != 1 || served[0].Peer != "c" || served[0].Step != st.Step || served[0].Bytes != st.Bytes {
		t.Fatalf("a served %+v; c copied %+v", served, st)
	}
	t.Logf("c copied step %d from a: %d bytes in %s", st.Step, st.Bytes, st.Took)
	if c2.peers.joiningSelf() {
		t.Fatal("c was never admitted into the quorum")
	}
	for _, w := range []*Worker{a, b} {
		if gone, _ := w.peers.anyRetired("c"); gone {
			t.Fatalf("%s still has c retired", w.tr.Self())
		}
	}
	return []*Worker{a, b, c2}
}

// TestRejoiningReplicaCatchesUpFromALivePeer: a restarted replica copies the current weights,
// inner and outer optimizer state from a live replica at an outer-step boundary (the
// survivors never stop), follows the quorum's results until every member heard it, is
// admitted, and contributes to the outer steps after: the three end with the same bits,
// and those differ from the run in which c never came back (its contribution counted).
func TestRejoiningReplicaCatchesUpFromALivePeer(t *testing.T) {
	for _, mode := range []jobspec.Sync{jobspec.SyncDiLoCo, jobspec.SyncStreaming} {
		t.Run(string(mode), func(t *testing.T) {
			ws := rejoinRun(t, mode, true)
			a := workerParams(ws[0])
			sameBits(t, "a and b", a, workerParams(ws[1]))
			sameBits(t, "a and the rejoined c", a, workerParams(ws[2]))
			without := workerParams(rejoinRun(t, mode, false)[0])
			diff := 0.0
			for name, v := range a {
				for i := range v {
					diff = math.Max(diff, math.Abs(float64(v[i]-without[name][i])))
				}
			}
			if diff == 0 {
				t.Fatal("the weights are those of the run without c: its contributions after rejoining did not count")
			}
		})
	}
}

// FuzzStateCopyHeader: a copy header from the network is refused or accepted within the
// joiner's bound, never more.
func FuzzStateCopyHeader(f *testing.F) {
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 9), 1000), 3000))
	f.Add(make([]byte, copyHeaderSize))
	f.Add([]byte{1, 2, 3})
	const bound, maxStep = 10 << 20, 100
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := parseCopyHeader(p, bound, maxStep)
		if err != nil {
			return
		}
		total := h.weights + h.optim
		if h.weights <= 0 || total > bound || h.step > maxStep || h.chunks < 1 || h.lastLen <= 0 || h.lastLen > copyChunk ||
			(h.chunks-1)*copyChunk+h.lastLen != total {
			t.Fatalf("accepted %+v", h)
		}
	})
}

// FuzzDecodeStateCopy: a copy's bytes decode or fail with an error, never panic.
func FuzzDecodeStateCopy(f *testing.F) {
	var w, o bytes.Buffer
	tensors := map[string]*kernels.Tensor{"x": kernels.NewTensor(2, 3)}
	model.EncodeSafetensors(&w, tensors, nil)                            //nolint:errcheck
	model.EncodeSafetensors(&o, tensors, map[string]string{"step": "3"}) //nolint:errcheck
	f.Add(append(w.Bytes(), o.Bytes()...), w.Len())
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0}, 8)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		decodeStateCopy(b, n) //nolint:errcheck
	})
}

// FuzzHeldSets: a phase-2 payload parses only at its size.
func FuzzHeldSets(f *testing.F) {
	f.Add(heldSets{7, 1, 4}.append(nil))
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeldSets(b)
		if err == nil && (len(b) != heldSetsSize || !bytes.Equal(h.append(nil), b)) {
			t.Fatalf("parsed %d bytes as %+v", len(b), h)
		}
	})
}

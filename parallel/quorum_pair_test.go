package parallel

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// TestPairGoesOnAloneOnceTheOtherIsRetired: of two replicas, b stops; a's outer step waits
// for b's presence (one of two is no majority) until the control plane retires b, and then
// completes alone instead of failing on the majority of the two it began with.
func TestPairGoesOnAloneOnceTheOtherIsRetired(t *testing.T) {
	cfg, plan := quorumConfig(3, 3, jobspec.SyncDiLoCo)
	plan.Replicas, plan.Batches = plan.Replicas[:2], plan.Batches[:2]
	net := NewInMemory("a", "b")
	t.Cleanup(net.Close)
	a, err := NewWorker(cfg, plan, "a", net.Peer("a"), testData())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var err error
		for a.StepsDone() < 3 && err == nil {
			_, err = a.Step(context.Background())
		}
		done <- err
	}()
	testutil.WaitFor(t, 20*time.Second, "a's presence at its outer step", func() bool { return net.SentFrames(frame.KindScalar) > 0 })
	a.Retire("b")
	if err := <-done; err != nil {
		t.Fatalf("a's outer step once b was retired: %v", err)
	}
}

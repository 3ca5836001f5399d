package testnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// localCorpora are the three nodes' own corpora, of different text and size, so that
// each node's local evaluation events show which file it trained on.
var localCorpora = []struct {
	line   string
	repeat int
}{
	{"if err := n.Start(ctx); err != nil { return err } // node zero\n", 1500},
	{"the quick brown fox jumps over the lazy dog, said node one.\n", 1700},
	{"0123456789 9876543210 2468 1357 -- node two counts\n", 1900},
}

// localDataJob is a DiLoCo job of three replicas on the local dataset "corpus": checkpoints
// off, so that no blob at all moves between nodes.
func localDataJob(local string) []byte {
	spec := jobspec.DefaultSpec()
	spec.Name = "federated"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Local: local}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches = 40, 8, jobspec.Fixed(1)
	spec.Train.EvalEvery, spec.Train.Warmup, spec.Train.LR = 20, 5, 0.005
	spec.Parallel.Replicas, spec.Parallel.Stages, spec.Parallel.Sync = jobspec.Fixed(3), jobspec.Auto(), jobspec.SyncDiLoCo
	spec.Parallel.InnerSteps = 5
	spec.Placement.MinNodes = 3
	spec.Checkpoint.Every = 0
	b, _ := spec.Document()
	return b
}

// TestFederatedLocalData: three nodes, each with its own local directory exposed as
// "corpus", train one DiLoCo job with data.local: each replica runs on one node and trains
// and evaluates on that node's own file (its local_eval events name the file's split
// sizes), each node's validation loss falls, and the per-kind byte counters show that no
// data crossed the wire: no blob fetched or served, no activation or gradient frame, only
// the replicas' reductions. A job naming a dataset no node exposes fails to plan, naming
// data.local.
func TestFederatedLocalData(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	parallelScenario(t)
	topo := oneRegion(3)
	wantTrain := map[string]int{} // node name → its corpus's training tokens
	for i := range topo.Nodes {
		dir := t.TempDir()
		text := strings.Repeat(localCorpora[i].line, localCorpora[i].repeat)
		if err := os.WriteFile(filepath.Join(dir, "corpus.txt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		topo.Nodes[i].LocalData = []string{"corpus=" + filepath.Join(dir, "corpus.txt")}
		wantTrain[topo.Nodes[i].Name] = len(text) - len(text)*5/100
	}
	tn := startTestnet(t, topo)
	nodes := tn.Nodes()

	missing := submitJob(t, tn, nodes[0], localDataJob("elsewhere"))
	var md consensus.JobDetail
	if err := tn.WaitFor(func() bool { md = missing.detail(); return md.Status.Terminal() }, time.Minute); err != nil {
		t.Fatalf("a job on a dataset no node has did not end: %v (status %s)", err, md.Status)
	}
	if md.Status != consensus.JobFailed || !slices.ContainsFunc(md.Events, func(ev consensus.Event) bool {
		return strings.Contains(ev.Message, "no feasible plan: data.local: no live node exposes a local dataset \"elsewhere\"")
	}) || slices.ContainsFunc(md.Events, func(ev consensus.Event) bool { return ev.Kind == consensus.EventWorkerFailed }) {
		t.Fatalf("a job on a dataset no node has: status %s, events %+v; want it failed by the planner, naming data.local, no worker started", md.Status, md.Events)
	}

	w := submitJob(t, tn, nodes[0], localDataJob("corpus"))
	d := w.waitDone(3 * time.Minute)
	if d.Spec.Data.Blob != "" {
		t.Fatalf("a data.local job got a dataset blob %s", d.Spec.Data.Blob)
	}
	jp := planOf(d)
	byID := map[string]*Node{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	if len(jp.Replicas) != 3 {
		t.Fatalf("plan %+v, want three replicas", jp.Replicas)
	}
	for _, r := range jp.Replicas {
		if len(r) != 1 {
			t.Fatalf("a replica of %d stages: %+v", len(r), jp.Replicas)
		}
	}
	checkLocalEvals(t, d, byID, wantTrain)
	for _, n := range nodes {
		checkNoDataBytes(t, n)
	}
}

// checkLocalEvals checks that every node recorded its validation loss on its own data at
// every evaluation, on its own file's split, and that the loss fell.
func checkLocalEvals(t *testing.T, d consensus.JobDetail, byID map[string]*Node, wantTrain map[string]int) {
	t.Helper()
	losses := map[string][]float64{}
	for _, ev := range d.Events {
		if ev.Kind != consensus.EventLocalEval {
			continue
		}
		n := byID[ev.By]
		name, loss, ok := jobspec.LocalEvalOf(ev.Message)
		if n == nil || !ok || name != "corpus" {
			t.Fatalf("local evaluation by %q: %q", ev.By, ev.Message)
		}
		if want := fmt.Sprintf("train %d tokens", wantTrain[n.Spec.Name]); !strings.Contains(ev.Message, want) {
			t.Errorf("%s evaluated %q, want its own file (%s)", n.Spec.Name, ev.Message, want)
		}
		losses[n.Spec.Name] = append(losses[n.Spec.Name], loss)
		t.Logf("step %d %s: %s", ev.Step, n.Spec.Name, ev.Message)
	}
	for name := range wantTrain {
		l := losses[name]
		if len(l) < 2 {
			t.Fatalf("%s recorded %d local evaluations, want one per evaluation step", name, len(l))
		}
		if l[len(l)-1] >= l[0]-0.5 {
			t.Errorf("%s: validation loss on its own data went from %.3f to %.3f, want a fall of > 0.5", name, l[0], l[len(l)-1])
		}
	}
}

// checkNoDataBytes checks n's per-kind byte counters: no blob bytes fetched or served, no
// activation or gradient bytes sent; DiLoCo's reductions did flow.
func checkNoDataBytes(t *testing.T, n *Node) {
	t.Helper()
	text, err := n.Client().Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sum := func(pattern string) float64 {
		var s float64
		for _, m := range regexp.MustCompile(`(?m)^`+pattern+`(?:\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(string(text), -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			s += v
		}
		return s
	}
	for _, c := range []string{`meshnode_blob_fetched_bytes_total`, `meshnode_blob_chunks_served_total`} {
		if v := sum(c); v != 0 {
			t.Errorf("%s: %s = %v, want 0 (no data between nodes)", n.Spec.Name, c, v)
		}
	}
	for _, kind := range []string{"activation", "gradient"} {
		if v := sum(`meshnode_dataplane_sent_bytes_total\{[^}]*kind="` + kind + `"[^}]*\}`); v != 0 {
			t.Errorf("%s: %v %s bytes sent, want 0", n.Spec.Name, v, kind)
		}
	}
	reduce := sum(`meshnode_dataplane_sent_bytes_total\{[^}]*kind="reduce"[^}]*\}`)
	if reduce == 0 {
		t.Errorf("%s sent no reduce bytes: the replicas did not synchronise", n.Spec.Name)
	}
	t.Logf("%s: %.0f reduce bytes sent, 0 blob, 0 activation/gradient", n.Spec.Name, reduce)
}

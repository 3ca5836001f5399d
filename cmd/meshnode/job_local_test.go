package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// TestJobDetailShowsEachNodesLocalData: a data.local job's detail names, per node, the
// dataset it trained on and its validation loss at the first and latest evaluation.
func TestJobDetailShowsEachNodesLocalData(t *testing.T) {
	d := consensus.JobDetail{ID: "j", Spec: jobspec.DefaultSpec()}
	d.Spec.Data = jobspec.Data{Local: "clinic"}
	for _, e := range []struct {
		by   string
		step int
		loss float64
	}{{"nodeA", 0, 5.5}, {"nodeB", 0, 5.4}, {"nodeA", 20, 3.25}, {"nodeB", 20, 2.75}} {
		d.Events = append(d.Events, consensus.Event{Kind: consensus.EventLocalEval, By: e.by, Step: e.step,
			Message: jobspec.LocalEvalMessage("clinic", 1000, 50, e.loss)})
	}
	var b bytes.Buffer
	printJobDetail(&b, d, 0)
	out := b.String()
	for _, want := range []string{`local dataset "clinic" on each node`, "nodeA  val loss 5.5000 at step 0, 3.2500 at step 20", "nodeB  val loss 5.4000 at step 0, 2.7500 at step 20", "train 1000 tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("detail lacks %q:\n%s", want, out)
		}
	}
}

// TestLayerMapShowsEachReplicasShards: the plan's training shards show beside each replica.
func TestLayerMapShowsEachReplicasShards(t *testing.T) {
	jp := scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "a", First: 0, Last: 4}}, {{Node: "b", First: 0, Last: 4}}},
		Batches: []int{8, 8}, DataShards: [][]int{{0, 2}, {1}}}
	raw, _ := json.Marshal(jp)
	var b bytes.Buffer
	printLayerMap(&b, raw)
	for _, want := range []string{"replica 0, batch 8, training shards [0 2]", "replica 1, batch 8, training shards [1]"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("layer map lacks %q:\n%s", want, b.String())
		}
	}
}

package node

import (
	"encoding/json"
	"regexp"
	"strconv"
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/scheduler"
)

// checkTrainingMetrics scrapes every node of a finished job's plan and checks the figures
// that only the nodes training it have: step time by phase, data-plane bytes to the next
// stage's node, checkpoint durations, raft leader changes and the blob store.
func checkTrainingMetrics(t *testing.T, nodes []*Node, job consensus.Job) {
	t.Helper()
	var jp scheduler.JobPlan
	if err := json.Unmarshal(job.CurrentPlan().Plan, &jp); err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Node{}
	for _, n := range nodes {
		byID[n.ID().String()] = n
	}
	fetched := 0.0
	for _, stages := range jp.Replicas {
		for s, st := range stages {
			text := scrape(t, byID[st.Node])
			next := ""
			if s+1 < len(stages) && stages[s+1].Node != st.Node {
				next = stages[s+1].Node
			}
			checkNodeTraining(t, text, job.ID, job.Spec.Train.Steps, next)
			t.Logf("stage %d on %s:\n%s\n%s\n%s", s, st.Node, filterLines(text, "meshnode_train_"),
				filterLines(text, "meshnode_dataplane_sent_bytes"), filterLines(text, "meshnode_checkpoint_"))
			fetched += metricValue(t, text, `meshnode_blob_fetches_total`)
		}
	}
	if fetched < 1 {
		t.Errorf("no node of the plan fetched a blob (the dataset was published by the submitting node)")
	}
}

// checkNodeTraining checks one training node's metrics; next is the node of its next
// stage ("" for the last stage).
func checkNodeTraining(t *testing.T, text, id string, steps int, next string) {
	t.Helper()
	j := `{job="` + id + `"}`
	if v := metricValue(t, text, `meshnode_train_steps_total`+j); v < float64(steps) {
		t.Errorf("meshnode_train_steps_total = %v, want ≥ %d", v, steps)
	}
	if v := metricValue(t, text, `meshnode_train_step_phase_seconds_total{job="`+id+`",phase="compute"}`); v <= 0 {
		t.Errorf("compute seconds = %v, want > 0", v)
	}
	for _, p := range []string{"transfer", "bubble", "sync"} {
		if v := metricValue(t, text, `meshnode_train_step_phase_seconds_total{job="`+id+`",phase="`+p+`"}`); v < 0 {
			t.Errorf("%s seconds = %v, want ≥ 0", p, v)
		}
	}
	if next != "" {
		series := `meshnode_dataplane_sent_bytes_total{codec="none",kind="activation",peer="` + next + `"}`
		if v := metricValue(t, text, series); v <= 0 {
			t.Errorf("%s = %v, want > 0", series, v)
		}
	}
	if v := metricValue(t, text, `meshnode_checkpoint_write_seconds_count`+j); v < 1 {
		t.Errorf("checkpoint writes observed: %v, want ≥ 1", v)
	}
	if v := metricValue(t, text, `meshnode_checkpoint_replication_seconds_count`+j); v < 1 {
		t.Errorf("checkpoint replications observed: %v, want ≥ 1", v)
	}
	for _, s := range []string{`meshnode_raft_leader_changes_total`, `meshnode_blob_stored`, `meshnode_blob_stored_bytes`} {
		if v := metricValue(t, text, s); v < 1 {
			t.Errorf("%s = %v, want ≥ 1", s, v)
		}
	}
	for _, s := range []string{`meshnode_blob_removed_total`, `meshnode_blob_chunks_served_total`, `meshnode_dataplane_bad_frames_total`} {
		metricValue(t, text, s)
	}
	// An honest job disconnects nobody for breaking the protocol.
	for _, s := range []string{`meshnode_dataplane_misbehaved_total`, `meshnode_rpc_disconnects_total`} {
		if v := metricValue(t, text, s); v != 0 {
			t.Errorf("%s = %v in an honest job, want 0", s, v)
		}
	}
}

// scrape returns n's /metrics, read with the API token.
func scrape(t *testing.T, n *Node) string {
	t.Helper()
	b, err := testClient(t, n).Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricValue is the value of one series in a Prometheus text exposition; a missing
// series fails the test and reads as -1.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Errorf("/metrics has no %s", series)
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Errorf("/metrics: %s = %q: %v", series, m[1], err)
	}
	return v
}

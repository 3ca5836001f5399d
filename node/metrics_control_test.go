package node

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// checkControlMetrics scrapes n's /metrics after job id ended done with steps steps and
// checks the training and raft figures a dashboard would graph.
func checkControlMetrics(t *testing.T, n *Node, id string, steps int) {
	t.Helper()
	b, err := testClient(t, n).Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	want := map[string]string{
		`meshnode_job_step{job="` + id + `"}`:                      strconv.Itoa(steps),
		`meshnode_job_status{job="` + id + `",status="done"}`:      "1",
		`meshnode_job_status{job="` + id + `",status="running"}`:   "0",
		`meshnode_job_plan_epoch{job="` + id + `"}`:                "1",
		`meshnode_raft_voters`:                                     "",
		`meshnode_raft_term`:                                       "",
		`meshnode_job_tokens_per_second{job="` + id + `"}`:         "",
		`meshnode_job_val_loss{job="` + id + `"}`:                  "",
		`meshnode_job_checkpoint_step{job="` + id + `"}`:           "",
		`meshnode_job_sent_bytes_total{job="` + id + `"}`:          "",
		`meshnode_raft_state{state="Leader"}`:                      "",
		`meshnode_job_steps_redone_total{job="` + id + `"}`:        "0",
		`meshnode_job_train_loss{job="` + id + `"}`:                "",
		`meshnode_raft_applied_index`:                              "",
		`meshnode_job_step_seconds{job="` + id + `"}`:              "",
		`meshnode_job_checkpoints{job="` + id + `"}`:               "",
		`meshnode_peers{state="alive"}`:                            "",
		`meshnode_raft_commit_index`:                               "",
		`meshnode_raft_nonvoters`:                                  "",
		`meshnode_job_status{job="` + id + `",status="cancelled"}`: "0",
		`meshnode_job_status{job="` + id + `",status="submitted"}`: "0",
		`meshnode_job_status{job="` + id + `",status="planning"}`:  "0",
		`meshnode_job_status{job="` + id + `",status="failed"}`:    "0",
		`process_resident_memory_bytes`:                            "",
		`go_goroutines`:                                            "",
		`meshnode_gemm_gflops`:                                     "",
		`meshnode_memory_budget_bytes`:                             "",
		`meshnode_connected_peers`:                                 "",
		`meshnode_auth_failures_total`:                             "",
		`meshnode_refused_streams_total`:                           "",
		`meshnode_malformed_messages_total`:                        "",
	}
	for series, value := range want {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
		m := re.FindStringSubmatch(text)
		switch {
		case m == nil:
			t.Errorf("/metrics has no %s", series)
		case value != "" && m[1] != value:
			t.Errorf("/metrics: %s = %s, want %s", series, m[1], value)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", filterLines(text, "meshnode_"))
	}
}

func filterLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

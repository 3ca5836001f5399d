package api

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Status is GET /v1/status: the node's identity, addresses, profile and mesh size.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	return out, c.get(ctx, "/v1/status", &out)
}

// Peers is GET /v1/peers: the node's peer table with measured links.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var out []Peer
	return out, c.get(ctx, "/v1/peers", &out)
}

// Raft is GET /v1/raft: the node's view of the raft group.
func (c *Client) Raft(ctx context.Context) (RaftStatus, error) {
	var out RaftStatus
	return out, c.get(ctx, "/v1/raft", &out)
}

// Promote is POST /v1/raft/promote/{id}: approve non-voter id's promotion (now when it is
// caught up and a voter seat is free, else at the next free seat). The node must be a
// voter (403 otherwise); an unknown id or a voter is an *Error with status 400.
func (c *Client) Promote(ctx context.Context, id string) (PromotionResult, error) {
	var out PromotionResult
	return out, c.Do(ctx, http.MethodPost, "/v1/raft/promote/"+url.PathEscape(id), nil, nil, &out)
}

// Refuse is POST /v1/raft/refuse/{id}: non-voter id is never promoted automatically until
// an operator promotes it. The same statuses as Promote.
func (c *Client) Refuse(ctx context.Context, id string) (PromotionResult, error) {
	var out PromotionResult
	return out, c.Do(ctx, http.MethodPost, "/v1/raft/refuse/"+url.PathEscape(id), nil, nil, &out)
}

// Jobs is GET /v1/jobs, oldest first; consistent reads through the leader.
func (c *Client) Jobs(ctx context.Context, consistent bool) ([]JobSummary, error) {
	var out []JobSummary
	return out, c.get(ctx, "/v1/jobs"+consistentQuery(consistent), &out)
}

// Job is GET /v1/jobs/{id}; consistent reads through the leader. An unknown job is an
// *Error with status 404.
func (c *Client) Job(ctx context.Context, id string, consistent bool) (JobDetail, error) {
	var out JobDetail
	return out, c.get(ctx, jobPath(id)+consistentQuery(consistent), &out)
}

// Submit is POST /v1/jobs: spec is a job spec in YAML or JSON, dataRoot the absolute
// directory its local data paths must lie under (empty: only builtin corpora, or the
// node's configured roots). It returns the new job's ID; a bad spec is an *Error with
// status 400 naming the field.
func (c *Client) Submit(ctx context.Context, spec []byte, dataRoot string) (string, error) {
	res, err := c.SubmitJob(ctx, spec, dataRoot)
	return res.ID, err
}

// SubmitJob is Submit returning the whole answer: the ID and the members that held the
// job's dataset when the node answered. It waits up to Config.SubmitTimeout, not
// Config.Timeout: the node answers once the dataset is published and replicated.
func (c *Client) SubmitJob(ctx context.Context, spec []byte, dataRoot string) (SubmitResult, error) {
	h := http.Header{"Content-Type": {"application/yaml"}}
	if dataRoot != "" {
		h.Set(DataRootHeader, dataRoot)
	}
	var out SubmitResult
	return out, c.do(ctx, c.submitHTTP, http.MethodPost, "/v1/jobs", bytes.NewReader(spec), h, &out)
}

// Cancel is DELETE /v1/jobs/{id}: it cancels the job and returns its summary; 404 when
// unknown, 409 when already finished.
func (c *Client) Cancel(ctx context.Context, id string) (JobSummary, error) {
	var out JobSummary
	return out, c.Do(ctx, http.MethodDelete, jobPath(id), nil, nil, &out)
}

// Checkpoints is GET /v1/jobs/{id}/checkpoints.
func (c *Client) Checkpoints(ctx context.Context, id string) ([]CheckpointView, error) {
	var out []CheckpointView
	return out, c.get(ctx, jobPath(id)+"/checkpoints", &out)
}

// Export is GET /v1/jobs/{id}/export: one safetensors file of the job's weights, from its
// latest complete checkpoint or (step ≥ 0) that step's.
func (c *Client) Export(ctx context.Context, id string, step int) ([]byte, error) {
	path := jobPath(id) + "/export"
	if step >= 0 {
		path += "?step=" + strconv.Itoa(step)
	}
	var raw []byte
	return raw, c.get(ctx, path, &raw)
}

// Tokenizer is GET /v1/jobs/{id}/tokenizer: the tokenizer.json the job's corpus was
// encoded with. A job trained on bytes or .bin tokens has none: a 404 (StatusCode).
func (c *Client) Tokenizer(ctx context.Context, id string) ([]byte, error) {
	var raw []byte
	return raw, c.get(ctx, jobPath(id)+"/tokenizer", &raw)
}

// Metrics is GET /metrics: the node's Prometheus metrics in text format.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var raw []byte
	return raw, c.get(ctx, "/metrics", &raw)
}

func jobPath(id string) string { return "/v1/jobs/" + url.PathEscape(id) }

func consistentQuery(consistent bool) string {
	if consistent {
		return "?consistent=true"
	}
	return ""
}

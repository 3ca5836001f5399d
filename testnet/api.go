package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/node"
)

// apiTimeout bounds one request to a node's API.
const apiTimeout = 10 * time.Second

// API is a client of one node's local HTTP API (docs/mesh.md, docs/jobspec.md).
type API struct {
	// Addr is the API's host:port.
	Addr   string
	client *http.Client
}

// NewAPI returns a client of the API at addr (host:port).
func NewAPI(addr string) *API {
	return &API{Addr: addr, client: &http.Client{Timeout: apiTimeout}}
}

// Peers is GET /v1/peers.
func (a *API) Peers(ctx context.Context) ([]node.PeerView, error) {
	var out []node.PeerView
	return out, a.do(ctx, http.MethodGet, "/v1/peers", nil, &out)
}

// Status is GET /v1/status.
func (a *API) Status(ctx context.Context) (node.StatusView, error) {
	var out node.StatusView
	return out, a.do(ctx, http.MethodGet, "/v1/status", nil, &out)
}

// Raft is GET /v1/raft.
func (a *API) Raft(ctx context.Context) (consensus.RaftStatus, error) {
	var out consensus.RaftStatus
	return out, a.do(ctx, http.MethodGet, "/v1/raft", nil, &out)
}

// Submit posts a job spec (YAML or JSON) and returns the job's id.
func (a *API) Submit(ctx context.Context, spec []byte) (string, error) {
	var out consensus.SubmitResult
	return out.ID, a.do(ctx, http.MethodPost, "/v1/jobs", spec, &out)
}

// Job is GET /v1/jobs/{id}.
func (a *API) Job(ctx context.Context, id string) (consensus.JobDetail, error) {
	var out consensus.JobDetail
	return out, a.do(ctx, http.MethodGet, "/v1/jobs/"+id, nil, &out)
}

func (a *API) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+a.Addr+path, rd)
	if err != nil {
		return err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

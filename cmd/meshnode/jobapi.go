package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultAPIAddr is where `meshnode join` serves its local HTTP API unless told otherwise.
const defaultAPIAddr = "127.0.0.1:7070"

// addJobAPIFlag registers --api (env MESHNODE_API): the local node's HTTP API address.
func addJobAPIFlag(cmd *cobra.Command, addr *string) {
	def := defaultAPIAddr
	if env := os.Getenv("MESHNODE_API"); env != "" {
		def = env
	}
	cmd.Flags().StringVar(addr, "api", def, "address of the local node's HTTP API (env MESHNODE_API)")
}

// jobAPI talks to a node's /v1/jobs and /v1/raft endpoints.
type jobAPI struct {
	base   string
	client *http.Client
}

func newJobAPI(addr string) (*jobAPI, error) {
	base := strings.TrimRight(addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, usagef("--api: %q is not host:port or an http URL", addr)
	}
	return &jobAPI{base: base, client: &http.Client{Timeout: 30 * time.Second}}, nil
}

// apiError is an error answer of the API: its HTTP status and message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// do sends one request and decodes a 2xx JSON answer into out (if not nil).
func (a *jobAPI) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot reach the meshnode API at %s (is `meshnode join` running here? set --api or MESHNODE_API): %w", a.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read API answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &apiError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode API answer of %s %s: %w", method, path, err)
	}
	return nil
}

// consistentQuery is the query string for --consistent.
func consistentQuery(consistent bool) string {
	if consistent {
		return "?consistent=true"
	}
	return ""
}

// jobErr turns an API error about a job into the CLI's error: a missing job is bad input
// (exit 2), anything else exits 1.
func jobErr(id string, err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return usagef("job %s not found (see `meshnode jobs`)", id)
	}
	return err
}

func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

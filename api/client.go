package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultAddr is where a node serves its API unless told otherwise.
const DefaultAddr = "127.0.0.1:7070"

// DataRootHeader carries the submitting client's data root (an absolute directory) with
// POST /v1/jobs: local data sources must be regular files under it (see docs/security.md).
const DataRootHeader = "Meshnode-Data-Root"

// maxAnswer bounds an answer the client reads (an exported model included).
const maxAnswer = 1 << 30

// Config says which node a Client talks to and how.
type Config struct {
	// Addr is the API's host:port or http:// URL. Empty means DefaultAddr.
	Addr string
	// Token is the node's bearer token (TokenFile). Empty sends none: the node then answers
	// 401 to everything.
	Token string
	// Timeout bounds one request. Zero means 30 s; negative means no bound but ctx's.
	Timeout time.Duration
}

// Client is a client of one node's HTTP API. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the API cfg names, or an error naming --api when the address is
// not host:port or an http URL.
func New(cfg Config) (*Client, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	base := strings.TrimRight(addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--api: %q is not host:port or an http URL", addr)
	}
	timeout := cfg.Timeout
	switch {
	case timeout == 0:
		timeout = 30 * time.Second
	case timeout < 0:
		timeout = 0
	}
	return &Client{base: base, token: cfg.Token, http: &http.Client{Timeout: timeout}}, nil
}

// Addr is the base URL the client sends to.
func (c *Client) Addr() string { return c.base }

// Error is a non-2xx answer of the API: its HTTP status and the server's message.
type Error struct {
	Method, Path string
	Status       int
	Message      string
}

// Error is the server's message, which names what was wrong.
func (e *Error) Error() string {
	if e.Status == http.StatusUnauthorized {
		return e.Message + " (the CLI reads the token from <data-dir>/" + TokenFile + "; set --data-dir or MESHNODE_TOKEN)"
	}
	return e.Message
}

// StatusCode returns err's HTTP status when err is (or wraps) an *Error, else 0.
func StatusCode(err error) int {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// Do sends one request to path (with its query) and, for a 2xx answer, decodes its JSON
// body into out (nil: discard it; *[]byte: the raw body). header, if not nil, is added to
// the request. A non-2xx answer is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader, header http.Header, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot reach the meshnode API at %s (is `meshnode join` running here? set --api or MESHNODE_API): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxAnswer)
	}
	if resp.StatusCode/100 != 2 {
		return answerError(method, path, resp, data)
	}
	return decodeAnswer(method, path, data, out)
}

func answerError(method, path string, resp *http.Response, data []byte) error {
	var e ErrorBody
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(data))
	}
	if e.Error == "" {
		e.Error = resp.Status
	}
	return &Error{Method: method, Path: path, Status: resp.StatusCode, Message: e.Error}
}

func decodeAnswer(method, path string, data []byte, out any) error {
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.Do(ctx, http.MethodGet, path, nil, nil, out)
}

func (c *Client) send(ctx context.Context, method, path string, body []byte, header http.Header, out any) error {
	return c.Do(ctx, method, path, bytes.NewReader(body), header, out)
}

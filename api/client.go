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
	"sync"
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
	// Token is the node's API token (TokenFile). It is never sent: the client makes the
	// node prove it holds it, then signs each request with it (auth.go). Empty signs
	// nothing: the node then answers 401 to everything.
	Token string
	// TokenSource says where Token came from (a token file's path, EnvToken), for errors.
	// Empty means "the API token".
	TokenSource string
	// NodeID, if not empty, is the ID the node must prove it has (the runtime file's).
	NodeID string
	// Timeout bounds one request. Zero means 30 s; negative means no bound but ctx's.
	Timeout time.Duration
	// SubmitTimeout bounds a job submit, which the node answers only once it has read,
	// published and replicated the job's dataset (minutes for a corpus of gigabytes).
	// Zero means DefaultSubmitTimeout; negative means no bound but ctx's.
	SubmitTimeout time.Duration
}

// DefaultSubmitTimeout is how long a submit may wait for the node's answer by default:
// longer than the node takes at most to publish a job's dataset (5 minutes) and replicate
// it (2 minutes), so the client does not give up on a submit the node is still serving.
const DefaultSubmitTimeout = 10 * time.Minute

// Client is a client of one node's HTTP API. It is safe for concurrent use.
type Client struct {
	base        string
	host        string // the Host the client sends, which the node's proof covers
	token       string
	tokenSource string
	nodeID      string
	http        *http.Client
	submitHTTP  *http.Client // http with Config.SubmitTimeout, for job submits

	mu     sync.Mutex
	proven bool // the process at base proved it holds token
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
	return &Client{base: base, host: u.Host, token: cfg.Token, tokenSource: cfg.TokenSource, nodeID: cfg.NodeID,
		http:       &http.Client{Timeout: requestTimeout(cfg.Timeout, 30*time.Second)},
		submitHTTP: &http.Client{Timeout: requestTimeout(cfg.SubmitTimeout, DefaultSubmitTimeout)}}, nil
}

// requestTimeout is an http.Client's Timeout for a configured one: zero means def,
// negative none.
func requestTimeout(configured, def time.Duration) time.Duration {
	switch {
	case configured == 0:
		return def
	case configured < 0:
		return 0
	}
	return configured
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
// the request. With a token, the first request makes the node prove it holds the token
// (an error wrapping ErrNotTheNode if it cannot; nothing else is sent then), and every
// request is signed with it. A non-2xx answer is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader, header http.Header, out any) error {
	return c.do(ctx, c.http, method, path, body, header, out)
}

// do is Do through hc.
func (c *Client) do(ctx context.Context, hc *http.Client, method, path string, body io.Reader, header http.Header, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = io.ReadAll(body); err != nil {
			return fmt.Errorf("%s %s: read request body: %w", method, path, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	var reqMAC []byte
	if c.token != "" {
		if err := c.prove(ctx); err != nil {
			return err
		}
		if reqMAC, err = c.sign(req, payload); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c.unreachable(ctx, err)
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
	if reqMAC != nil {
		if err := c.checkAnswer(resp, reqMAC, data); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return decodeAnswer(method, path, data, out)
}

// unreachable is the error of a request that got no answer.
func (c *Client) unreachable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("cannot reach the meshnode API at %s (is `meshnode join` running here? set --api or MESHNODE_API): %w", c.base, err)
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

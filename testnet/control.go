package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/api"
)

// Control is the supervisor's HTTP API on loopback, through which `meshnode testnet kill`,
// `partition` and `down` reach the process that owns the nodes and the relays:
//
//	GET  /state                   State
//	POST /kill?node=N             SIGKILL node N
//	POST /partition?a=A&b=B       cut A from B on both planes (&heal=true ends it)
//	POST /stop                    stop the testnet; the supervisor then exits
type Control struct {
	tn   *Testnet
	srv  *http.Server
	ln   net.Listener
	stop chan struct{}
}

// ServeControl starts the control API of tn on a free loopback port.
func ServeControl(tn *Testnet) (*Control, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("control API: %w", err)
	}
	c := &Control{tn: tn, ln: ln, stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) { reply(w, tn.State(), nil) })
	mux.HandleFunc("POST /kill", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, tn.Kill(r.URL.Query().Get("node")))
	})
	mux.HandleFunc("POST /partition", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		op := tn.Partition
		if q.Get("heal") == "true" {
			op = tn.Heal
		}
		err := op(q.Get("a"), q.Get("b"))
		reply(w, tn.State().Partitions, err)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-c.stop:
		default:
			close(c.stop)
		}
		reply(w, nil, nil)
	})
	c.srv = &http.Server{Handler: localOnly(c.Addr(), mux), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go c.srv.Serve(ln)
	return c, nil
}

// localOnly refuses what a web page could send to the control API: a request for another
// Host than the bound loopback address (DNS rebinding) and a cross-origin POST.
func localOnly(bound string, h http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(bound)
	allowed := []string{bound, "localhost:" + port}
	cop := http.NewCrossOriginProtection()
	inner := cop.Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(allowed, strings.ToLower(r.Host)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: fmt.Sprintf("host %q is not allowed", r.Host)})
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// Addr is the control API's host:port.
func (c *Control) Addr() string { return c.ln.Addr().String() }

// Stopped is closed when a client asked the testnet to stop.
func (c *Control) Stopped() <-chan struct{} { return c.stop }

// Close stops serving.
func (c *Control) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.srv.Shutdown(ctx)
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, ErrUnknownName) {
			code = http.StatusNotFound
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(v)
}

// ControlClient talks to a supervisor's control API through the api package's client,
// so its errors carry the supervisor's message as the node API's do.
type ControlClient struct {
	Addr string
	c    *api.Client
	err  error // from building c: returned by every call
}

// NewControlClient returns a client of the control API at addr.
func NewControlClient(addr string) *ControlClient {
	c, err := api.New(api.Config{Addr: addr})
	if err != nil {
		err = fmt.Errorf("testnet supervisor at %s: %w", addr, err)
	}
	return &ControlClient{Addr: addr, c: c, err: err}
}

// Kill kills a node.
func (c *ControlClient) Kill(ctx context.Context, name string) error {
	return c.post(ctx, "/kill?node="+url.QueryEscape(name), nil)
}

// Partition cuts (or, with heal, restores) the control and data planes between a and b
// and returns the partitions then in force.
func (c *ControlClient) Partition(ctx context.Context, a, b string, heal bool) ([][2]string, error) {
	var out [][2]string
	q := url.Values{"a": {a}, "b": {b}}
	if heal {
		q.Set("heal", "true")
	}
	return out, c.post(ctx, "/partition?"+q.Encode(), &out)
}

// Stop asks the supervisor to stop the testnet and exit.
func (c *ControlClient) Stop(ctx context.Context) error { return c.post(ctx, "/stop", nil) }

func (c *ControlClient) post(ctx context.Context, path string, out any) error {
	if c.err != nil {
		return c.err
	}
	if err := c.c.Do(ctx, http.MethodPost, path, nil, nil, out); err != nil {
		return fmt.Errorf("testnet supervisor at %s: %w", c.Addr, err)
	}
	return nil
}

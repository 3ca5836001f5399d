package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshnode/meshnode/mesh"
)

// RuntimeFile is written in the data directory while the node runs, so that local tools
// (the testnet, scripts) find its API and addresses without fixed ports.
const RuntimeFile = "node.json"

// StatusView is the body of GET /v1/status, a stable contract (`meshnode status -o json`).
type StatusView struct {
	ID      string        `json:"id"`
	Mesh    string        `json:"mesh"`
	Addrs   []string      `json:"addrs"`
	Profile *mesh.Profile `json:"profile"`
	// Peers counts the other members currently alive or suspect.
	Peers     int       `json:"peers"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
}

// PeerView is one element of GET /v1/peers, a stable contract (`meshnode peers -o json`).
type PeerView struct {
	ID       string         `json:"id"`
	Addrs    []string       `json:"addrs"`
	State    mesh.PeerState `json:"state"`
	LastSeen time.Time      `json:"last_seen"`
	// RTTMs and BandwidthMbps are null until the first successful probe. Bandwidth is in
	// megabits per second.
	RTTMs         *float64   `json:"rtt_ms"`
	BandwidthMbps *float64   `json:"bandwidth_mbps"`
	ProbedAt      *time.Time `json:"probed_at,omitempty"`
	ProbeError    string     `json:"probe_error,omitempty"`
	// LinkSource is the probe behind the numbers: "dataplane" (over the tensor data
	// plane, preferred) or "libp2p".
	LinkSource string        `json:"link_source,omitempty"`
	Profile    *mesh.Profile `json:"profile"`
}

// RuntimeInfo is the content of RuntimeFile.
type RuntimeInfo struct {
	ID    string   `json:"id"`
	API   string   `json:"api"`
	Addrs []string `json:"addrs"`
	PID   int      `json:"pid"`
	// DataAddr is the UDP address the data plane is bound to (not the advertised one).
	DataAddr string `json:"data_addr,omitempty"`
}

// Status returns what GET /v1/status serves.
func (n *Node) Status() StatusView {
	v := StatusView{ID: n.ID().String(), Mesh: n.cfg.Mesh, Addrs: []string{}, Profile: n.mesh.Profile(),
		Version: n.cfg.Version, StartedAt: n.startAt}
	for _, a := range n.mesh.Addrs() {
		v.Addrs = append(v.Addrs, a.String())
	}
	for _, p := range n.mesh.Peers() {
		if p.State != mesh.StateDead {
			v.Peers++
		}
	}
	return v
}

// Peers returns what GET /v1/peers serves.
func (n *Node) Peers() []PeerView {
	out := []PeerView{}
	for _, p := range n.mesh.Peers() {
		v := PeerView{ID: p.ID.String(), Addrs: []string{}, State: p.State, LastSeen: p.LastSeen.UTC(), Profile: p.Profile,
			ProbeError: p.Link.Err, LinkSource: string(p.Link.Source)}
		for _, a := range p.Addrs {
			v.Addrs = append(v.Addrs, a.String())
		}
		if p.Link.RTT > 0 {
			ms := float64(p.Link.RTT.Microseconds()) / 1000
			v.RTTMs = &ms
		}
		if p.Link.BandwidthBps > 0 {
			mbps := p.Link.BandwidthBps * 8 / 1e6
			v.BandwidthMbps = &mbps
		}
		if !p.Link.MeasuredAt.IsZero() {
			at := p.Link.MeasuredAt.UTC()
			v.ProbedAt = &at
		}
		out = append(out, v)
	}
	return out
}

func (n *Node) routes() {
	n.mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.Status()) })
	n.mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.Peers()) })
	n.mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// apiServer is the HTTP API as a service: it listens on loopback, writes RuntimeFile and
// removes it on close.
type apiServer struct {
	addr    string
	handler http.Handler
	dataDir string
	log     *slog.Logger

	mu    sync.Mutex
	srv   *http.Server
	bound string
	done  chan struct{}
}

func (n *Node) startAPI(ctx context.Context) error {
	if err := n.api.start(ctx); err != nil {
		return err
	}
	info := RuntimeInfo{ID: n.ID().String(), API: n.api.boundAddr(), PID: os.Getpid(), Addrs: n.Status().Addrs}
	if dp := n.DataPlane(); dp != nil {
		info.DataAddr = dp.Addr()
	}
	if err := writeRuntimeFile(filepath.Join(n.cfg.DataDir, RuntimeFile), info); err != nil {
		n.log.Warn("runtime file", "err", err)
	}
	return nil
}

func (a *apiServer) start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", a.addr)
	if err != nil {
		return fmt.Errorf("API on %s: %w (another node running? pick another port with --api)", a.addr, err)
	}
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 10 * time.Second}
	a.mu.Lock()
	a.srv, a.bound, a.done = srv, ln.Addr().String(), make(chan struct{})
	a.mu.Unlock()
	go func() {
		defer close(a.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("API server", "err", err)
		}
	}()
	return nil
}

func (a *apiServer) boundAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bound
}

func (a *apiServer) close() error {
	a.mu.Lock()
	srv, done := a.srv, a.done
	a.mu.Unlock()
	_ = os.Remove(filepath.Join(a.dataDir, RuntimeFile))
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	<-done
	return err
}

// writeRuntimeFile writes info atomically (temp file, rename).
func writeRuntimeFile(path string, info RuntimeInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadRuntimeFile reads the RuntimeFile of a running node's data directory.
func ReadRuntimeFile(dataDir string) (RuntimeInfo, error) {
	var info RuntimeInfo
	b, err := os.ReadFile(filepath.Join(dataDir, RuntimeFile))
	if err != nil {
		return info, fmt.Errorf("no running node found in %s: %w", dataDir, err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w", filepath.Join(dataDir, RuntimeFile), err)
	}
	return info, nil
}

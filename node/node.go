package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/node/fingerprint"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/dataplane"
)

// Node is one meshnode daemon. Create it with New, add services and routes, Start it, and
// Close it when done. Its methods are safe for concurrent use.
type Node struct {
	cfg      Config
	log      *slog.Logger
	mesh     *mesh.Mesh
	profiler *fingerprint.Profiler
	reg      *prometheus.Registry
	mux      *http.ServeMux
	api      *apiServer
	cons     *consensusService

	dpMu sync.Mutex
	dp   *dataplane.Plane

	profMu sync.Mutex  // serialises writes of the announced profile (measure, refreshDataAddrs)
	prober *linkProber // linkprobe.go: which data-plane address each peer was reached at

	data   *datasets     // dataset.go: blobs and decoded datasets
	engine *engine       // nil when consensus is disabled
	speed  *speedChecker // nil when consensus is disabled

	evidence evidenceOffers // evidence_blob.go: evidence blobs announced to the leader

	train        *trainingMetrics // metrics_training.go
	blobsRemoved atomic.Int64     // blobs the runner deleted, for metrics_blob.go

	mu       sync.Mutex
	services []Service
	started  int // how many services started; Close closes these
	state    lifecycle
	startAt  time.Time
}

type lifecycle int

const (
	created lifecycle = iota
	running
	closed
)

// New validates cfg, loads or creates the identity in cfg.DataDir, and builds the mesh
// (already listening) and the HTTP API's routes. Nothing joins the mesh before Start.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	key, created, err := mesh.LoadOrCreateIdentity(filepath.Join(cfg.DataDir, mesh.IdentityFile))
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log.With("component", "node"), reg: prometheus.NewRegistry(), mux: http.NewServeMux()}
	mc, err := cfg.meshConfig()
	if err != nil {
		return nil, err
	}
	mc.Identity, mc.Logger, mc.Registerer = key, log, n.reg
	mc.OnHolePunched = func(p peer.ID) { // tensors leave the relay for the punched connection
		if dp := n.DataPlane(); dp != nil {
			dp.RenewStreams(p.String())
		}
	}
	mc.OnRestarted = func(p peer.ID, dead time.Time) { // no frame is lost in the old process's connections
		if dp := n.DataPlane(); dp != nil {
			if k := dp.DropConnsBefore(p.String(), dead); k > 0 {
				n.log.Info("closed data-plane connections to a restarted member's old process", "peer", p, "conns", k)
			}
		}
	}
	if n.mesh, err = mesh.New(mc); err != nil {
		return nil, addrInUse(ListenerMesh, cfg.meshListenAddrs(), err)
	}
	if created {
		n.log.Info("created identity", "id", n.mesh.ID(), "path", filepath.Join(cfg.DataDir, mesh.IdentityFile))
	}
	n.profiler = fingerprint.New(fingerprint.Config{Compute: cfg.Profile, DataDir: cfg.DataDir,
		MemoryBudget: cfg.MemoryBudget, MemoryBudgetFraction: cfg.MemoryBudgetFraction, Version: cfg.Version, HostLabel: cfg.HostLabel})
	n.profiler.SetBusy(func() bool { return n.engine != nil && n.engine.training() })
	if cfg.profilerHook != nil {
		cfg.profilerHook(n.profiler)
	}
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newMeshCollector(n.mesh), newControlCollector(n.Consensus), newDataPlaneCollector(n), newBlobCollector(n, &n.blobsRemoved))
	n.train = newTrainingMetrics(n.reg)
	n.routes()
	n.dashboardRoutes()
	n.prober = newLinkProber(n) // linkprobe.go
	n.services = []Service{
		&dataPlaneService{n: n, key: key},
		&profilerService{n: n, done: make(chan struct{})},
		funcService{"mesh", n.mesh.Start, n.mesh.Close},
		n.prober,
	}
	if os.Getenv(PartitionHookEnv) == "1" {
		n.services = append(n.services, &partitionHook{n: n})
	}
	if n.data, err = newDatasets(n); err != nil {
		n.mesh.Close()
		return nil, err
	}
	if err := n.addConsensus(); err != nil {
		return nil, err
	}
	if !cfg.Consensus.Disabled {
		n.speed = newSpeedChecker(n)
		n.services = append(n.services, n.speed)
		if n.engine, err = newEngine(n); err != nil {
			n.mesh.Close()
			return nil, err
		}
		n.services = append(n.services, n.engine)
	}
	n.exportRoutes()
	if cfg.API != "" {
		n.api = newAPIServer(cfg, n.mux, n.log)
		n.services = append(n.services, funcService{"api", n.startAPI, n.api.close})
	}
	return n, nil
}

// AddService appends s to the services started after the mesh and before the HTTP API
// (so that the API only answers once everything behind it runs). It must be called
// before Start.
func (n *Node) AddService(s Service) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state != created {
		return errors.New("node: AddService after Start")
	}
	at := len(n.services)
	if n.api != nil {
		at-- // keep the API last
	}
	n.services = append(n.services[:at], append([]Service{s}, n.services[at:]...)...)
	return nil
}

// Handle registers an HTTP handler on the local API (Go 1.22 patterns, e.g.
// "GET /v1/jobs/{id}"). Routes may be added at any time.
func (n *Node) Handle(pattern string, h http.Handler) { n.mux.Handle(pattern, h) }

// Registry is the node's Prometheus registry, served on /metrics.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Mesh returns the node's mesh membership, for services that speak mesh protocols.
func (n *Node) Mesh() *mesh.Mesh { return n.mesh }

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.mesh.ID() }

// Start starts every service in order: the device profile is measured first (so that the
// first heartbeat carries it), then the mesh joins, then added services, then the API.
// ctx bounds the start only; Close stops the node. On failure everything started is
// closed again.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state != created {
		return errors.New("node: Start called twice or after Close")
	}
	n.startAt = time.Now()
	started, err := startAll(ctx, n.services)
	n.started = started
	if err != nil {
		n.state = closed
		_ = n.mesh.Close() // New built it; release its host even if it never started
		return err
	}
	n.state = running
	n.log.Info("node running", "id", n.ID(), "mesh", n.cfg.Mesh, "api", n.APIAddr())
	return nil
}

// Close stops the services in reverse order; the mesh announces that this node leaves.
// It is safe to call more than once, and without Start.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case closed:
		return nil
	case created:
		n.state = closed
		return n.mesh.Close()
	}
	n.state = closed
	return closeAll(n.services[:n.started])
}

// APIAddr is the address the HTTP API listens on (port resolved), empty before Start or
// without an API.
func (n *Node) APIAddr() string {
	if n.api == nil {
		return ""
	}
	return n.api.boundAddr()
}

// DashboardURL is the address of the node's web dashboard with its API token in the URL
// fragment (the browser never sends a fragment to any server; the page moves the token to
// this tab's sessionStorage and removes it from the address bar). Empty without an API.
func (n *Node) DashboardURL() string {
	if n.api == nil {
		return ""
	}
	n.api.mu.Lock()
	defer n.api.mu.Unlock()
	if n.api.bound == "" {
		return ""
	}
	return "http://" + n.api.bound + "/#token=" + n.api.token
}

// profilerService measures the profile once at start (so that the mesh announces it from
// its first heartbeat) and again every Reprofile interval until it is closed.
type profilerService struct {
	n    *Node
	done chan struct{}
	wg   sync.WaitGroup
}

func (p *profilerService) Name() string { return "profiler" }

func (p *profilerService) Start(ctx context.Context) error {
	if err := p.n.measure(ctx); err != nil {
		return err
	}
	if every := p.n.cfg.reprofile(); every > 0 {
		p.wg.Add(1)
		go p.loop(every)
	}
	return nil
}

func (p *profilerService) loop(every time.Duration) {
	defer p.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			_ = p.n.measure(context.Background())
		}
	}
}

// Close stops remeasuring, waiting for a measurement in progress.
func (p *profilerService) Close() error {
	close(p.done)
	p.wg.Wait()
	return nil
}

func (n *Node) measure(ctx context.Context) error {
	start := time.Now()
	prof, warn := n.profiler.Measure(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}

	if warn != nil {
		n.log.Warn("device profile", "err", warn)
	}
	if prof.MemoryBudgetBytes > prof.MemoryAvailableBytes && prof.MemoryAvailableBytes > 0 {
		n.log.Warn("memory budget exceeds available memory", "budget", prof.MemoryBudgetBytes, "available", prof.MemoryAvailableBytes)
	}
	n.profMu.Lock()
	prof.DataAddrs, prof.Region, prof.LocalData = n.DataAddrs(), n.cfg.Region, n.LocalDataNames()
	if len(prof.DataAddrs) > 0 {
		prof.DataAddr = prof.DataAddrs[0]
	}
	n.mesh.SetProfile(prof)
	n.profMu.Unlock()
	n.log.Info("device profile measured", "gemm_gflops", fmt.Sprintf("%.1f", prof.GemmGFLOPS), "shape", prof.GemmShape,
		"train_gflops", fmt.Sprintf("%.1f", prof.TrainGFLOPS), "train_micro_gflops", fmt.Sprintf("%.1f", prof.TrainMicroGFLOPS),
		"cores", prof.Cores, "memory_budget", prof.MemoryBudgetBytes, "gpus", len(prof.GPUs), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

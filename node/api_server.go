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

	"github.com/meshnode/meshnode/api"
)

// Limits of the API server: a slow or hostile local client cannot hold a connection or a
// goroutine forever, nor make the node buffer a large request.
const (
	apiReadHeaderTimeout = 10 * time.Second
	apiReadTimeout       = time.Minute
	// apiWriteTimeout covers the slowest handler: packing a submitted corpus and
	// replicating it (datasetPublishTimeout, datasetReplicaTimeout) or assembling an export.
	apiWriteTimeout  = datasetPublishTimeout + datasetReplicaTimeout + 2*time.Minute
	apiIdleTimeout   = 2 * time.Minute
	apiMaxHeaderSize = 64 << 10
)

// apiServer is the HTTP API as a service: it listens on loopback, guards every request
// (Host allowlist, cross-origin protection, bearer token, body limit), writes
// api.RuntimeFile and removes it on close.
type apiServer struct {
	addr    string
	handler http.Handler
	dataDir string
	// hosts are the extra Host values allowed besides loopback with the bound port.
	hosts []string
	log   *slog.Logger

	mu    sync.Mutex
	srv   *http.Server
	bound string
	token string
	done  chan struct{}
}

func newAPIServer(cfg Config, handler http.Handler, log *slog.Logger) *apiServer {
	return &apiServer{addr: cfg.API, handler: handler, dataDir: cfg.DataDir, hosts: cfg.APIHosts, log: log}
}

func (n *Node) startAPI(ctx context.Context) error {
	if err := n.api.start(ctx, n.ID().String()); err != nil {
		return err
	}
	info := api.RuntimeInfo{ID: n.ID().String(), API: n.api.boundAddr(), PID: os.Getpid(), Addrs: n.Status().Addrs}
	if start, err := api.ProcessStart(info.PID); err == nil {
		info.Start = start
	}
	if dp := n.DataPlane(); dp != nil {
		info.DataAddr = dp.Addr()
	}
	if err := writeRuntimeFile(filepath.Join(n.cfg.DataDir, api.RuntimeFile), info); err != nil {
		n.log.Warn("runtime file", "err", err)
	}
	return nil
}

func (a *apiServer) start(ctx context.Context, nodeID string) error {
	token, err := api.LoadOrCreateToken(a.dataDir)
	if err != nil {
		return fmt.Errorf("API: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", a.addr)
	if err != nil {
		return addrInUse(ListenerAPI, a.addr, fmt.Errorf("API: %w", err))
	}
	bound := ln.Addr().String()
	g := newAPIGuard(token, nodeID, allowedHosts(bound, a.hosts), a.log)
	srv := &http.Server{
		Handler:           g.wrap(a.handler),
		ReadHeaderTimeout: apiReadHeaderTimeout, ReadTimeout: apiReadTimeout,
		WriteTimeout: apiWriteTimeout, IdleTimeout: apiIdleTimeout,
		MaxHeaderBytes: apiMaxHeaderSize,
		ErrorLog:       slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	a.mu.Lock()
	a.srv, a.bound, a.token, a.done = srv, bound, token, make(chan struct{})
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
	_ = os.Remove(filepath.Join(a.dataDir, api.RuntimeFile))
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
func writeRuntimeFile(path string, info api.RuntimeInfo) error {
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

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// PartitionHookEnv is a test hook for the testnet's control-plane partitions: a node
// started with it set to "1" serves PartitionSocket, a Unix socket in its data directory
// (mode 0600), on which the testnet supervisor names the peers this node must be cut off
// from (mesh.Mesh.Isolate). Unset (always, outside the testnet) no socket exists; the
// hook cannot be enabled or reached from the network, and it can only refuse peers and
// change the emulated slowdown (SlowdownPath).
const PartitionHookEnv = "MESHNODE_TEST_PARTITION_HOOK"

// PartitionSocket is the hook's socket, relative to the data directory.
const PartitionSocket = "partition.sock"

// PartitionPath is the hook's one request: PUT with a JSON list of peer IDs, the whole set
// to be cut off (an empty list heals); 204 once the connections to them are closed.
const PartitionPath = "/isolate"

// maxSocketPath bounds a Unix socket's path (sun_path: 108 bytes on Linux, 104 on the BSDs,
// the terminating NUL included).
const maxSocketPath = 104

// maxIsolateBody bounds the hook's request: a list of peer IDs.
const maxIsolateBody = 1 << 20

// partitionHook is the service behind PartitionHookEnv.
type partitionHook struct {
	n   *Node
	srv *http.Server
	ln  net.Listener
}

func (h *partitionHook) Name() string { return "partition hook" }

func (h *partitionHook) Start(context.Context) error {
	path := filepath.Join(h.n.cfg.DataDir, PartitionSocket)
	if len(path) >= maxSocketPath {
		// The node runs as before; only partitions of its control plane are unavailable.
		h.n.log.Warn("testnet partition hook disabled: its socket path is too long for a Unix socket",
			"socket", path, "max", maxSocketPath-1)
		return nil
	}
	_ = os.Remove(path) // left by a process that was killed
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", PartitionHookEnv, path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("%s: %w", PartitionHookEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+PartitionPath, h.isolate)
	mux.HandleFunc("PUT "+SlowdownPath, h.slowdown)
	h.ln, h.srv = ln, &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go h.srv.Serve(ln)
	h.n.log.Warn("testnet partition hook enabled", "socket", path)
	return nil
}

func (h *partitionHook) isolate(w http.ResponseWriter, r *http.Request) {
	var ids []string
	if err := json.NewDecoder(io.LimitReader(r.Body, maxIsolateBody)).Decode(&ids); err != nil {
		http.Error(w, "a JSON list of peer IDs: "+err.Error(), http.StatusBadRequest)
		return
	}
	peers := make([]peer.ID, 0, len(ids))
	for _, s := range ids {
		p, err := peer.Decode(s)
		if err != nil {
			http.Error(w, fmt.Sprintf("peer %q: %v", s, err), http.StatusBadRequest)
			return
		}
		peers = append(peers, p)
	}
	h.n.mesh.Isolate(peers)
	w.WriteHeader(http.StatusNoContent)
}

func (h *partitionHook) Close() error {
	if h.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = h.srv.Close()
	}
	return err
}

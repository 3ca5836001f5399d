package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node"
)

// isolateTimeout bounds one node's answer to its partition hook.
const isolateTimeout = 10 * time.Second

// Partition separates a and b (nodes or regions) on both planes until Heal: the relays
// drop every data-plane datagram between them, and every node of one side is told,
// through its partition hook (node.PartitionHookEnv), to refuse and close its libp2p
// connections to the nodes of the other side, so that heartbeats, Raft and blobs stop
// too. It returns once every live node has applied its cut.
func (t *Testnet) Partition(a, b string) error {
	if err := t.net.Partition(a, b); err != nil {
		return err
	}
	err := t.applyCuts(context.Background())
	return errors.Join(err, t.SaveState())
}

// Heal ends a partition on both planes; it returns once every live node reconnects freely
// (reconnecting itself takes the mesh's discovery interval).
func (t *Testnet) Heal(a, b string) error {
	if err := t.net.Heal(a, b); err != nil {
		return err
	}
	err := t.applyCuts(context.Background())
	return errors.Join(err, t.SaveState())
}

// applyCuts tells every live node which peers the partitions in force cut it off from
// (the whole set each time, so a heal or a restarted node gets the current one).
func (t *Testnet) applyCuts(ctx context.Context) error {
	nodes := t.Nodes()
	var errs []error
	for _, n := range nodes {
		if !n.Alive() || n.ID == "" {
			continue
		}
		cut := []string{}
		for _, m := range nodes {
			if m != n && m.ID != "" && t.net.Cut(n.Spec.Name, m.Spec.Name) {
				cut = append(cut, m.ID)
			}
		}
		if err := n.isolate(ctx, cut); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isolate sends the node the peers it must be cut off from, through its partition hook.
func (n *Node) isolate(ctx context.Context, peers []string) error {
	body, _ := json.Marshal(peers)
	return putHook(ctx, n.Spec.Name, n.DataDir, node.PartitionPath, body)
}

// putHook sends body to path of the test hook (node.PartitionHookEnv) of the node name
// whose data directory is dataDir, and waits for its 204.
func putHook(ctx context.Context, name, dataDir, path string, body []byte) error {
	sock := filepath.Join(dataDir, node.PartitionSocket)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, isolateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://test-hook"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("node %s: test hook at %s: %w (see %s)", name, sock, err, filepath.Join(dataDir, LogFile))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("node %s: test hook %s: %s: %s", name, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

package consensus

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// A cluster ID is 16 random bytes in hex, created when a node bootstraps a new cluster. It
// is kept in <data-dir>/raft/cluster-id and, once the first leader commits it, in the FSM.
// Every raft and RPC handshake carries it, so two clusters bootstrapped independently
// (two testnets on one LAN, found by mDNS) refuse each other instead of merging. It is an
// identity, not a secret: admission to the control plane is decided by raft membership
// (access.go).
const clusterIDFile = "cluster-id"

var clusterIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func newClusterID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// loadClusterID reads the stored cluster ID; a missing file is "" with no error.
func loadClusterID(raftDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(raftDir, clusterIDFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read cluster id: %w", err)
	}
	id := string(bytes.TrimSpace(b))
	if !clusterIDPattern.MatchString(id) {
		return "", fmt.Errorf("cluster id file %s holds %q, not 32 hex digits", filepath.Join(raftDir, clusterIDFile), id)
	}
	return id, nil
}

// storeClusterID writes id durably (temp file, fsync, rename, directory fsync).
func storeClusterID(raftDir, id string) error {
	path := filepath.Join(raftDir, clusterIDFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("store cluster id: %w", err)
	}
	_, err = f.WriteString(id + "\n")
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(raftDir)
	}
	if err != nil {
		return fmt.Errorf("store cluster id in %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// ClusterID is the ID of the cluster this node belongs to, "" while a fresh node has not
// joined one yet.
func (c *Consensus) ClusterID() string {
	c.cidMu.Lock()
	defer c.cidMu.Unlock()
	if c.cid == "" {
		if id := c.fsm.ClusterID(); id != "" {
			c.adoptClusterIDLocked(id)
		}
	}
	return c.cid
}

// adoptClusterID records the cluster a fresh node has joined. A node that already has an
// ID keeps it: an ID never changes.
func (c *Consensus) adoptClusterID(id string) error {
	c.cidMu.Lock()
	defer c.cidMu.Unlock()
	if c.cid != "" {
		if c.cid != id {
			return fmt.Errorf("%w: this node is in cluster %s, the leader's is %s", ErrForeignCluster, c.cid, id)
		}
		return nil
	}
	if !clusterIDPattern.MatchString(id) {
		return fmt.Errorf("%w: cluster id %q", ErrBadRequest, id)
	}
	c.adoptClusterIDLocked(id)
	return nil
}

func (c *Consensus) adoptClusterIDLocked(id string) {
	if err := storeClusterID(c.raftDir(), id); err != nil {
		c.log.Warn("cannot persist the cluster id; it is kept in memory", "err", err)
	}
	c.cid = id
	c.log.Info("joined cluster", "cluster", id)
}

func (c *Consensus) raftDir() string { return filepath.Join(c.cfg.DataDir, "raft") }

// ensureClusterMeta commits this node's cluster ID and retention setting to the FSM when
// the FSM lacks them or differs. Only the leader calls it.
func (c *Consensus) ensureClusterMeta(ctx context.Context) error {
	id := c.ClusterID()
	if id == "" {
		// A cluster founded before cluster IDs existed: its leader creates one.
		id = newClusterID()
		if err := c.adoptClusterID(id); err != nil {
			return err
		}
	}
	quota := c.fsm.MaxLiveJobsPerMember()
	if quota != 0 && quota != c.cfg.MaxLiveJobsPerMember && c.quotaNoted.CompareAndSwap(false, true) {
		c.log.Info("the cluster's live-job quota applies, not this node's setting", "cluster", quota, "this_node", c.cfg.MaxLiveJobsPerMember)
	}
	if c.fsm.ClusterID() == id && c.fsm.KeepFinishedJobs() == c.cfg.KeepFinishedJobs && quota != 0 {
		return nil
	}
	_, err := c.propose(ctx, ClusterMetaType|IgnoreUnknownTypeFlag, ClusterMetaRequest{ClusterID: id, KeepFinishedJobs: c.cfg.KeepFinishedJobs,
		MaxLiveJobsPerMember: c.cfg.MaxLiveJobsPerMember})
	return err
}

package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Consensus is one node's member of the raft group: the raft instance, its stores, the
// transport over libp2p, the FSM and the RPC server that takes forwarded writes. Every
// method is safe for concurrent use.
type Consensus struct {
	cfg   Config
	host  host.Host
	log   *slog.Logger
	fsm   *FSM
	raft  *raft.Raft
	trans *raft.NetworkTransport
	wal   *wal.WAL
	// leaders counts leadership changes (leader_changes.go).
	leaders leaderWatch
	// evidence is the leader's judge of offender evidence and its per-reporter limits
	// (evidence.go).
	evidence evidenceDesk
	// misbehaviour counts peers disconnected for a protocol violation (misbehave.go).
	misbehaviour misbehaviour

	// memberMu serialises membership changes on the leader so that voter counts hold.
	memberMu sync.Mutex
	// planMu serialises plan epochs on the leader.
	planMu sync.Mutex

	hintMu     sync.Mutex
	leaderHint peer.ID // the leader another node named, for nodes not yet in the group

	// raftRef is raft once it runs, for the stream gate, which serves streams before.
	raftRef atomic.Pointer[raft.Raft]
	// quotaNoted is set once this node, leading, logged that the cluster's quota differs
	// from its own setting (cluster_id.go).
	quotaNoted atomic.Bool
	// cid is this node's cluster ID ("" until a fresh node joins a cluster).
	cidMu sync.Mutex
	cid   string
	// rejoin asks announceLoop to announce again when this node's configuration is stale.
	rejoin rejoinSignal
	// submits serialises submits on the leader for the quota (quota.go).
	submits submitGate
	// probation watches non-voters on the leader (promotion.go).
	probation probationClock
	// trusted are the peers this node asked to be let in by (access.go).
	trusted trustSet
	// refusedAt rate-limits refusal logs per peer.
	refusedMu sync.Mutex
	refusedAt map[string]time.Time

	// baseCtx is cancelled by Shutdown; shutdownCh is its Done channel.
	baseCtx      context.Context
	stop         context.CancelFunc
	shutdownCh   <-chan struct{}
	shutdownOnce sync.Once
	wg           sync.WaitGroup
}

// New opens (or creates) the raft state under cfg.DataDir/raft, starts raft over h, serves
// the RPC protocol on h and, in the background, announces this node to the leader until it
// is a member. It bootstraps a single-voter cluster when cfg.Bootstrap is set and no state
// exists. Call Shutdown (or Leave) to stop it; h stays the caller's.
func New(cfg Config, h host.Host) (*Consensus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Consensus{cfg: cfg, host: h, log: cfg.Logger.With("component", "consensus"), refusedAt: map[string]time.Time{}}
	c.rejoin.ask = make(chan struct{}, 1)
	c.baseCtx, c.stop = context.WithCancel(context.Background())
	c.shutdownCh = c.baseCtx.Done()
	c.fsm = NewFSM(c.log)
	if err := c.open(); err != nil {
		c.stop()
		_ = c.closeStores()
		return nil, err
	}
	h.SetStreamHandler(ProtocolRPC, c.serveRPC)
	c.wg.Add(2)
	go c.announceLoop()
	go c.autopilotLoop()
	return c, nil
}

func (c *Consensus) open() (err error) {
	dir := filepath.Join(c.cfg.DataDir, "raft")
	walDir := filepath.Join(dir, "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		return fmt.Errorf("create raft dir: %w", err)
	}
	hlog := NewHCLogger(c.log)
	if c.cid, err = loadClusterID(dir); err != nil {
		return err
	}
	w, err := wal.Open(walDir, wal.WithLogger(hlog.Named("wal")), wal.WithSegmentSize(c.cfg.WALSegmentSize))
	if err != nil {
		return fmt.Errorf("open raft wal %s: %w", walDir, err)
	}
	c.wal = w
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, c.cfg.SnapshotRetain, hlog.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("open raft snapshots in %s: %w", dir, err)
	}
	c.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: NewStreamLayer(c.host, raftGate{c}, c.cfg.RPCTimeout, func(p peer.ID, err error) { c.logRefusal("raft stream", p, err) }), MaxPool: 3, Timeout: c.cfg.RPCTimeout, Logger: hlog.Named("transport"),
	})
	rc := c.raftConfig(hlog)
	if c.cfg.Bootstrap {
		if err := c.bootstrap(rc, snaps); err != nil {
			return err
		}
	}
	r, err := raft.NewRaft(rc, c.fsm, w, w, snaps, c.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	r.RegisterObserver(c.leaders.observer())
	c.raft = r
	c.raftRef.Store(r)
	return nil
}

func (c *Consensus) raftConfig(hlog hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.host.ID().String())
	rc.Logger = hlog.Named("raft")
	rc.HeartbeatTimeout = c.cfg.HeartbeatTimeout
	rc.ElectionTimeout = c.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = c.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = c.cfg.CommitTimeout
	rc.SnapshotThreshold = c.cfg.SnapshotThreshold
	rc.SnapshotInterval = c.cfg.SnapshotInterval
	rc.TrailingLogs = c.cfg.TrailingLogs
	return rc
}

func (c *Consensus) bootstrap(rc *raft.Config, snaps raft.SnapshotStore) error {
	has, err := raft.HasExistingState(c.wal, c.wal, snaps)
	if err != nil {
		return fmt.Errorf("inspect raft state: %w", err)
	}
	if has {
		return nil
	}
	if c.cid == "" {
		c.cid = newClusterID()
		if err := storeClusterID(c.raftDir(), c.cid); err != nil {
			return err
		}
	}
	self := raft.Server{Suffrage: raft.Voter, ID: rc.LocalID, Address: raft.ServerAddress(rc.LocalID)}
	if err := raft.BootstrapCluster(rc, c.wal, c.wal, snaps, c.trans, raft.Configuration{Servers: []raft.Server{self}}); err != nil {
		return fmt.Errorf("bootstrap raft: %w", err)
	}
	c.log.Info("bootstrapped a new raft cluster", "id", rc.LocalID, "cluster", c.cid)
	return nil
}

// Shutdown stops raft, the RPC server and the stores. It does not leave the group (see
// Leave): a node that shuts down is expected back. It is idempotent.
func (c *Consensus) Shutdown() error {
	var err error
	c.shutdownOnce.Do(func() {
		c.stop()
		c.host.RemoveStreamHandler(ProtocolRPC)
		c.wg.Wait()
		c.closeEvidence() // after the RPC server: no evidence blob is taken up any more
		if c.raft != nil {
			// A snapshot lets a restarted node show its state before it reaches a leader.
			if serr := c.raft.Snapshot().Error(); serr != nil && !errors.Is(serr, raft.ErrNothingNewToSnapshot) {
				c.log.Warn("snapshot on shutdown failed", "err", serr)
			}
			err = c.raft.Shutdown().Error()
		}
		err = errors.Join(err, c.closeStores())
	})
	return err
}

func (c *Consensus) closeStores() error {
	var err error
	if c.trans != nil {
		err = c.trans.Close()
	}
	if c.wal != nil {
		err = errors.Join(err, c.wal.Close())
	}
	return err
}

// ID is this node's raft server ID: its peer ID.
func (c *Consensus) ID() peer.ID { return c.host.ID() }

// FSM is the local state machine, for readers that watch job state.
func (c *Consensus) FSM() *FSM { return c.fsm }

// IsLeader reports whether this node is the leader now.
func (c *Consensus) IsLeader() bool { return c.raft.State() == raft.Leader }

// Leader is the current leader's peer ID as this node knows it, or "" when unknown.
func (c *Consensus) Leader() peer.ID {
	_, id := c.raft.LeaderWithID()
	p, err := peer.Decode(string(id))
	if err != nil {
		return ""
	}
	return p
}

// propose commits one message through raft on the leader and returns the FSM's response.
// It waits for the result, ctx or shutdown, whichever comes first; when ctx or shutdown
// wins, the entry may still be committed later.
func (c *Consensus) propose(ctx context.Context, t MessageType, msg any) (any, error) {
	buf, err := Encode(t, msg)
	if err != nil {
		return nil, err
	}
	if len(buf) > MaxEntryBytes {
		return nil, fmt.Errorf("log entry of %d bytes (max %d): %w", len(buf), MaxEntryBytes, ErrTooLarge)
	}
	if c.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	f := c.raft.Apply(buf, c.cfg.RPCTimeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, raftError(err)
		}
		if rerr, ok := f.Response().(error); ok {
			return nil, rerr
		}
		return f.Response(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.shutdownCh:
		return nil, ErrShutdown
	}
}

// MaxEntryBytes bounds one raft log entry.
const MaxEntryBytes = 2 << 20

// raftError maps raft's errors onto this package's sentinels.
func raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	return err
}

// futureErr waits for a raft future the same three ways propose does.
func (c *Consensus) futureErr(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return raftError(err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.shutdownCh:
		return ErrShutdown
	}
}

func (c *Consensus) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.shutdownCh:
		return ErrShutdown
	}
}

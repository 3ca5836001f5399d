package consensus

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config configures one node's consensus component. DefaultConfig fills every field but
// DataDir; a zero duration or count means "use the default" as documented per field.
type Config struct {
	// DataDir is the node's data directory; raft keeps its WAL and snapshots in
	// DataDir/raft. Required.
	DataDir string
	// Bootstrap makes this node found a new single-voter cluster if it has no raft state
	// yet. A node with existing state ignores it. The node sets it for --bootstrap-raft or
	// when it was started with no bootstrap peers.
	Bootstrap bool
	// Voters is the number of voting members the leader maintains; later members join as
	// non-voters. Must be odd. Zero means 3.
	Voters int
	// Probation is how long the leader watches a live non-voter before it promotes it
	// automatically (an operator may approve or refuse earlier: promotion.go); zero means
	// DefaultProbation (30 s).
	Probation time.Duration
	// Profile is this node's capability summary, announced when it joins.
	Profile Profile
	// Logger receives this component's logs and raft's (through an hclog adapter). Nil
	// discards them.
	Logger *slog.Logger

	// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and CommitTimeout are raft's
	// timers; zero means raft's defaults (1 s, 1 s, 500 ms, 50 ms). Tests shorten them.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold is how many new entries trigger a snapshot; zero means 1024.
	SnapshotThreshold uint64
	// SnapshotInterval is how often raft checks SnapshotThreshold; zero means 30 s.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries are kept after a snapshot; zero means 1024.
	TrailingLogs uint64
	// SnapshotRetain is how many snapshots are kept on disk; zero means 2.
	SnapshotRetain int
	// RPCTimeout bounds one forwarded request (dial, send, wait, receive) and one raft
	// transport I/O; zero means 10 s.
	RPCTimeout time.Duration
	// WALSegmentSize is the size of one raft-wal segment file; zero means 16 MiB.
	WALSegmentSize int
	// KeepFinishedJobs is how many finished (done, failed, cancelled) jobs the FSM keeps;
	// older ones are dropped, oldest first. The leader commits it, so every replica drops
	// the same jobs. Zero means 100.
	KeepFinishedJobs int
	// MaxLiveJobsPerMember is how many live (not finished) jobs one member may have; a
	// submit beyond it fails with ErrQuota. The first leader to commit the cluster's
	// metadata replicates its value, which later leaders keep (quota.go). Zero means
	// DefaultMaxLiveJobsPerMember (16).
	MaxLiveJobsPerMember int
}

// DefaultConfig returns the production defaults with an empty DataDir.
func DefaultConfig() Config {
	return Config{
		Voters:               3,
		Probation:            DefaultProbation,
		HeartbeatTimeout:     time.Second,
		ElectionTimeout:      time.Second,
		LeaderLeaseTimeout:   500 * time.Millisecond,
		CommitTimeout:        50 * time.Millisecond,
		SnapshotThreshold:    1024,
		SnapshotInterval:     30 * time.Second,
		TrailingLogs:         1024,
		SnapshotRetain:       2,
		RPCTimeout:           10 * time.Second,
		WALSegmentSize:       16 << 20,
		KeepFinishedJobs:     DefaultKeepFinishedJobs,
		MaxLiveJobsPerMember: DefaultMaxLiveJobsPerMember,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setIfZero(&c.Voters, d.Voters)
	setIfZero(&c.Probation, d.Probation)
	setIfZero(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setIfZero(&c.ElectionTimeout, d.ElectionTimeout)
	setIfZero(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setIfZero(&c.CommitTimeout, d.CommitTimeout)
	setIfZero(&c.SnapshotThreshold, d.SnapshotThreshold)
	setIfZero(&c.SnapshotInterval, d.SnapshotInterval)
	setIfZero(&c.TrailingLogs, d.TrailingLogs)
	setIfZero(&c.SnapshotRetain, d.SnapshotRetain)
	setIfZero(&c.RPCTimeout, d.RPCTimeout)
	setIfZero(&c.WALSegmentSize, d.WALSegmentSize)
	setIfZero(&c.KeepFinishedJobs, d.KeepFinishedJobs)
	setIfZero(&c.MaxLiveJobsPerMember, d.MaxLiveJobsPerMember)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func setIfZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports every field that cannot work, each naming the field.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("consensus: DataDir must be set"))
	}
	if c.Voters < 0 || (c.Voters > 0 && c.Voters%2 == 0) {
		errs = append(errs, fmt.Errorf("consensus: Voters must be odd and ≥ 1 (got %d)", c.Voters))
	}
	if c.Probation < 0 {
		errs = append(errs, fmt.Errorf("consensus: Probation must be ≥ 0 (got %s)", c.Probation))
	}
	if c.KeepFinishedJobs < 0 || c.KeepFinishedJobs > MaxKeepFinishedJobs {
		errs = append(errs, fmt.Errorf("consensus: KeepFinishedJobs must be 0 (default) to %d (got %d)", MaxKeepFinishedJobs, c.KeepFinishedJobs))
	}
	if c.MaxLiveJobsPerMember < 0 || c.MaxLiveJobsPerMember > MaxMaxLiveJobsPerMember {
		errs = append(errs, fmt.Errorf("consensus: MaxLiveJobsPerMember must be 0 (default) to %d (got %d)", MaxMaxLiveJobsPerMember, c.MaxLiveJobsPerMember))
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout && c.HeartbeatTimeout > 0 {
		errs = append(errs, fmt.Errorf("consensus: LeaderLeaseTimeout (%s) must not exceed HeartbeatTimeout (%s)", c.LeaderLeaseTimeout, c.HeartbeatTimeout))
	}
	return errors.Join(errs...)
}

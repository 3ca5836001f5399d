package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// op is one operation of ProtocolRPC. Leader-only operations answered by a follower fail
// with ErrNotLeader and name the leader. Idempotent ones may be retried after a failure
// whose outcome is unknown (a stream that broke after the request was sent).
type op struct {
	leaderOnly bool
	idempotent bool
	// open operations are served to peers outside the raft configuration (a node asking
	// who leads, or asking to join as itself); every other one only to members.
	open bool
	// fn runs the operation for the authenticated caller from (this node's own ID for a
	// local call).
	fn func(c *Consensus, ctx context.Context, from peer.ID, body []byte) (any, error)
}

// ops is the table of operations; decodeRequest rejects any other name.
var ops = map[string]op{
	"leader":     {open: true, fn: (*Consensus).handleLeader, idempotent: true},
	"join":       {open: true, leaderOnly: true, idempotent: true, fn: (*Consensus).handleJoin},
	"applied":    {idempotent: true, fn: (*Consensus).handleApplied},
	"leave":      {leaderOnly: true, idempotent: true, fn: (*Consensus).handleLeave},
	"submit":     {leaderOnly: true, fn: (*Consensus).handleSubmit},
	"set_status": {leaderOnly: true, fn: (*Consensus).handleSetStatus},
	"set_plan":   {leaderOnly: true, fn: (*Consensus).handleSetPlan},
	"progress":   {leaderOnly: true, fn: (*Consensus).handleProgress},
	"checkpoint": {leaderOnly: true, fn: (*Consensus).handleCheckpoint},
	"event":      {leaderOnly: true, fn: (*Consensus).handleEvent},
	"evidence":   {leaderOnly: true, fn: (*Consensus).handleEvidence},
	"get_job":    {leaderOnly: true, idempotent: true, fn: (*Consensus).handleGetJob},
	"list_jobs":  {leaderOnly: true, idempotent: true, fn: (*Consensus).handleListJobs},
	"promotion":  {leaderOnly: true, idempotent: true, fn: (*Consensus).handlePromotion},
}

// handle runs one operation here for caller from, whose request named cluster, and
// returns its JSON result. A caller of another cluster is refused; so is a non-member
// asking for anything but an open operation.
func (c *Consensus) handle(ctx context.Context, from peer.ID, cluster, name string, body []byte) (json.RawMessage, error) {
	o, ok := ops[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown operation %q", ErrBadRequest, name)
	}
	if from != c.host.ID() {
		err := c.checkCluster(from, cluster)
		if err == nil && !o.open {
			err = c.Admit(from, cluster)
		}
		if err != nil {
			c.logRefusal("rpc "+name, from, err)
			return nil, err
		}
	}
	if o.leaderOnly && !c.IsLeader() {
		return nil, ErrNotLeader
	}
	res, err := o.fn(c, ctx, from, body)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

// serveRPC answers one request stream: deadline, bounded read, strict decode, handle,
// respond, Close; a frame that cannot be read resets the stream.
func (c *Consensus) serveRPC(s network.Stream) {
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	_ = s.SetDeadline(deadline)
	payload, err := readFrame(s, MaxRPCRequestBytes)
	if err != nil {
		c.log.Debug("rpc: bad frame", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
		return
	}
	var resp rpcResponse
	req, err := decodeRequest(payload)
	if err == nil {
		ctx, cancel := context.WithDeadline(c.baseCtx, deadline)
		resp.Body, err = c.handle(ctx, s.Conn().RemotePeer(), req.Cluster, req.Op, req.Body)
		cancel()
	}
	// A violation is answered first, then its sender disconnected (misbehave.go).
	defer c.disconnectIf(s.Conn().RemotePeer(), err)
	if err != nil {
		resp = rpcResponse{Code: codeOf(err), Error: err.Error()}
		if errors.Is(err, ErrNotLeader) {
			resp.Leader = c.Leader().String()
		}
	}
	out, err := json.Marshal(resp)
	if err == nil {
		err = writeFrame(s, out, MaxRPCResponseBytes)
	}
	if err != nil {
		c.log.Debug("rpc: write response", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

// dialError means the request never left this node: it is always safe to retry.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// call sends one request to target and waits for its answer, within RPCTimeout.
func (c *Consensus) call(ctx context.Context, target peer.ID, name string, body []byte) (json.RawMessage, error) {
	payload, err := encodeRequest(rpcRequest{Op: name, Cluster: c.ClusterID(), Body: body})
	if err != nil {
		return nil, err
	}
	if len(payload) > MaxRPCRequestBytes {
		return nil, fmt.Errorf("%s request of %d bytes: %w", name, len(payload), ErrTooLarge)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	s, err := c.host.NewStream(network.WithAllowLimitedConn(ctx, "consensus-rpc"), target, ProtocolRPC)
	if err != nil {
		return nil, dialError{fmt.Errorf("open rpc stream to %s: %w", target.ShortString(), err)}
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := writeFrame(s, payload, MaxRPCRequestBytes); err != nil {
		_ = s.Reset()
		return nil, dialError{err}
	}
	_ = s.CloseWrite()
	out, err := readFrame(s, MaxRPCResponseBytes)
	if err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("%s on %s: %w", name, target.ShortString(), err)
	}
	var resp rpcResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("%s on %s: decode response: %w", name, target.ShortString(), err)
	}
	if resp.Leader != "" {
		if id, err := peer.Decode(resp.Leader); err == nil && id != c.host.ID() {
			c.setHint(id)
		}
	}
	if resp.Code != "" || resp.Error != "" {
		return nil, errorFromWire(resp.Code, resp.Error)
	}
	return resp.Body, nil
}

// do runs operation name with arguments req and decodes its result into resp (if not
// nil): here when this node may serve it, else on the leader. It retries while no leader
// is known or the one it reached has stepped down, until ctx ends.
func (c *Consensus) do(ctx context.Context, name string, req, resp any) error {
	o := ops[name]
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	backoff := 10 * time.Millisecond
	for {
		out, err := c.attempt(ctx, name, o, body)
		if err == nil {
			if resp == nil {
				return nil
			}
			return json.Unmarshal(out, resp)
		}
		if !retryable(err, o) {
			return err
		}
		if cut := c.cutOff(); o.leaderOnly && cut > 0 {
			return fmt.Errorf("%s: %w: no contact with a leader for %s (cut off from the majority?) (last error: %v)", name, ErrNoLeader, cut.Round(time.Millisecond), err)
		}
		if serr := c.sleep(ctx, backoff); serr != nil {
			if errors.Is(serr, ErrShutdown) {
				return ErrShutdown
			}
			return fmt.Errorf("%s: %w (last error: %v)", name, ErrNoLeader, err)
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// cutOffAfter is how many election timeouts a node that once heard from a leader goes
// without contact before an operation only the leader serves fails at once instead of
// retrying until its context ends: far longer than an election takes (a leader's death
// costs one or two timeouts), so only a node cut off from the majority refuses early.
const cutOffAfter = 3

// OutOfTouch reports whether this follower has heard from no leader for more than
// cutOffAfter election timeouts: its FSM may be far behind the log.
func (c *Consensus) OutOfTouch() bool { return c.cutOff() > 0 }

// cutOff is how long this node has heard from no leader, when that is past cutOffAfter
// election timeouts (0 otherwise, and for a node that never heard from one: it is
// still joining).
func (c *Consensus) cutOff() time.Duration {
	r := c.raftRef.Load()
	if r == nil || r.State() == raft.Leader {
		return 0
	}
	last := r.LastContact()
	if last.IsZero() {
		return 0
	}
	if d := time.Since(last); d > cutOffAfter*c.cfg.ElectionTimeout {
		return d
	}
	return 0
}

func retryable(err error, o op) bool {
	var de dialError
	switch {
	case errors.Is(err, ErrShutdown):
		return false
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader), errors.As(err, &de):
		return true
	case errors.Is(err, errFrame):
		return o.idempotent
	}
	return false
}

func (c *Consensus) attempt(ctx context.Context, name string, o op, body []byte) (json.RawMessage, error) {
	if !o.leaderOnly || c.IsLeader() {
		return c.handle(ctx, c.host.ID(), c.ClusterID(), name, body)
	}
	target := c.Leader()
	if target == "" || target == c.host.ID() {
		target = c.hint()
	}
	if target == "" {
		target = c.findLeader(ctx)
	}
	if target == "" {
		return nil, ErrNoLeader
	}
	if name == "join" {
		// The leader starts replicating to this node before the join returns.
		c.trusted.add(target, time.Now())
	}
	out, err := c.call(ctx, target, name, body)
	var de dialError
	if errors.As(err, &de) && target == c.hint() {
		c.setHint("")
	}
	return out, err
}

func (c *Consensus) hint() peer.ID {
	c.hintMu.Lock()
	defer c.hintMu.Unlock()
	return c.leaderHint
}

func (c *Consensus) setHint(id peer.ID) {
	c.hintMu.Lock()
	defer c.hintMu.Unlock()
	c.leaderHint = id
}

// findLeader asks connected peers who the leader is; a node that is not yet a member of the
// group learns it this way.
func (c *Consensus) findLeader(ctx context.Context) peer.ID {
	peers := c.host.Network().Peers()
	slices.Sort(peers)
	for _, p := range peers {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		out, err := c.call(ctx, p, "leader", []byte("{}"))
		cancel()
		if err != nil {
			continue
		}
		var r LeaderInfo
		if json.Unmarshal(out, &r) == nil && r.Leader != "" {
			if id, err := peer.Decode(r.Leader); err == nil && id != c.host.ID() {
				return id
			}
		}
	}
	return ""
}

// LeaderInfo answers the "leader" operation.
type LeaderInfo struct {
	Leader string `json:"leader"`
}

func (c *Consensus) handleLeader(context.Context, peer.ID, []byte) (any, error) {
	return LeaderInfo{Leader: c.Leader().String()}, nil
}

// AppliedInfo answers the "applied" operation: the last log index this node's raft has
// applied (configuration entries included).
type AppliedInfo struct {
	Applied uint64 `json:"applied"`
}

func (c *Consensus) handleApplied(context.Context, peer.ID, []byte) (any, error) {
	return AppliedInfo{Applied: c.raft.AppliedIndex()}, nil
}

// decodeArgs decodes an operation's arguments strictly: unknown fields and trailing data
// are errors.
func decodeArgs[T any](body []byte) (T, error) {
	var v T
	err := strictUnmarshal(body, &v)
	return v, err
}

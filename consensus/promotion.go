package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/records"
)

// Promotion of a non-voter is earned, not granted at join: the leader promotes a live,
// caught-up non-voter automatically only after it has stayed alive in the group for
// Config.Probation, as this leader has watched it (a new leader watches anew). An operator
// can shorten that (approve: promote at the next free seat once caught up) or forbid it
// (refuse), through any voter's `meshnode raft promote|refuse ID`. Decisions are replicated
// in the FSM, so every later leader keeps them, and only voters may make them: a
// non-voter cannot approve itself.

// PromotionDecision is an operator's decision on a non-voter's promotion.
type PromotionDecision = records.PromotionDecision

// Promotion decisions. The empty decision is the default: promoted after probation.
const (
	PromotionApproved PromotionDecision = "approved"
	PromotionRefused  PromotionDecision = "refused"
)

// DefaultProbation is how long a non-voter stays alive in the group before it is promoted
// automatically, unless Config.Probation says otherwise.
const DefaultProbation = 30 * time.Second

// MaxPromotionDecisions bounds the decisions the FSM keeps.
const MaxPromotionDecisions = 4096

func (r PromotionRequest) validate() error {
	if r.Decision != PromotionApproved && r.Decision != PromotionRefused {
		return errors.Join(checkNodeID("promotion node", r.ID),
			fmt.Errorf("promotion decision %q: must be %q or %q", r.Decision, PromotionApproved, PromotionRefused))
	}
	return checkNodeID("promotion node", r.ID)
}

func (f *FSM) applyPromotion(req PromotionRequest) any {
	if f.state.Promotions == nil {
		f.state.Promotions = map[string]PromotionDecision{}
	}
	if _, ok := f.state.Promotions[req.ID]; !ok && len(f.state.Promotions) >= MaxPromotionDecisions {
		return fmt.Errorf("%w: %d promotion decisions kept (max %d)", ErrTooLarge, len(f.state.Promotions), MaxPromotionDecisions)
	}
	f.state.Promotions[req.ID] = req.Decision
	return nil
}

// Promotion is the operators' decision on node id ("" when none was made).
func (f *FSM) Promotion(id string) PromotionDecision {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Promotions[id]
}

// PromotionArgs asks the leader to record an operator's decision on node ID.
type PromotionArgs struct {
	ID       string            `json:"id"`
	Decision PromotionDecision `json:"decision"`
}

// PromotionResult says what the decision did.
type PromotionResult = records.PromotionResult

// Promote approves non-voter id: it is promoted now if it is caught up and a voter seat is
// free, otherwise at the next free seat, without waiting for its probation. It must be
// called on (or is forwarded from) a voter.
func (c *Consensus) Promote(ctx context.Context, id string) (PromotionResult, error) {
	return c.decidePromotion(ctx, id, PromotionApproved)
}

// Refuse forbids non-voter id's promotion until an operator promotes it.
func (c *Consensus) Refuse(ctx context.Context, id string) (PromotionResult, error) {
	return c.decidePromotion(ctx, id, PromotionRefused)
}

func (c *Consensus) decidePromotion(ctx context.Context, id string, d PromotionDecision) (PromotionResult, error) {
	var res PromotionResult
	if !c.isVoter(c.host.ID()) {
		return res, fmt.Errorf("%w: this node is a non-voter; promote or refuse through a voter's API", ErrForbidden)
	}
	err := c.do(ctx, "promotion", PromotionArgs{ID: id, Decision: d}, &res)
	return res, err
}

// handlePromotion records a decision for a voter (or the leader itself) and, for an
// approval, promotes at once when it can.
func (c *Consensus) handlePromotion(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[PromotionArgs](body)
	if err != nil {
		return nil, err
	}
	if from != c.host.ID() && !c.isVoter(from) {
		return nil, fmt.Errorf("%w: only a voter decides promotions; %s is not one", ErrForbidden, from)
	}
	req := PromotionRequest(args)
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	servers, err := c.servers(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == args.ID })
	if i < 0 {
		return nil, fmt.Errorf("%w: %s is not in the raft group (see meshnode raft status)", ErrBadRequest, args.ID)
	}
	if servers[i].Suffrage == raft.Voter {
		return nil, fmt.Errorf("%w: %s is already a voter; promote and refuse apply to non-voters", ErrBadRequest, args.ID)
	}
	if _, err := c.propose(ctx, PromotionType|IgnoreUnknownTypeFlag, req); err != nil {
		return nil, err
	}
	c.log.Info("promotion decision recorded", "id", args.ID, "decision", args.Decision, "by", from)
	res := PromotionResult{ID: args.ID, Decision: args.Decision, Suffrage: "nonvoter"}
	if args.Decision == PromotionApproved {
		if err := c.promoteAlive(ctx); err != nil {
			return nil, err
		}
		if c.isVoter(mustDecode(args.ID)) {
			res.Suffrage = "voter"
		} else {
			res.Note = "promoted at the next free voter seat once it is alive and caught up"
		}
	}
	return res, nil
}

func mustDecode(id string) peer.ID {
	p, _ := peer.Decode(id)
	return p
}

// probationClock remembers since when the leader has seen each non-voter alive in the
// group. It is forgotten when this node is not the leader, so a new leader watches anew.
type probationClock struct {
	mu    sync.Mutex
	since map[raft.ServerID]time.Time
}

// observe starts the clock of every live non-voter not yet watched and stops that of
// every one that is dead or gone.
func (p *probationClock) observe(servers []raft.Server, alive map[raft.ServerID]bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.since == nil {
		p.since = map[raft.ServerID]time.Time{}
	}
	seen := map[raft.ServerID]bool{}
	for _, s := range servers {
		if s.Suffrage != raft.Nonvoter || !alive[s.ID] {
			continue
		}
		seen[s.ID] = true
		if _, ok := p.since[s.ID]; !ok {
			p.since[s.ID] = now
		}
	}
	for id := range p.since {
		if !seen[id] {
			delete(p.since, id)
		}
	}
}

// served reports whether id has been watched alive for at least d.
func (p *probationClock) served(id raft.ServerID, d time.Duration, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	since, ok := p.since[id]
	return ok && now.Sub(since) >= d
}

func (p *probationClock) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.since)
}

// mayPromote reports whether the operators' decisions and the probation let id become a
// voter (being caught up is checked separately).
func (c *Consensus) mayPromote(id raft.ServerID) bool {
	switch c.fsm.Promotion(string(id)) {
	case PromotionRefused:
		return false
	case PromotionApproved:
		return true
	}
	return c.probation.served(id, c.cfg.Probation, time.Now())
}

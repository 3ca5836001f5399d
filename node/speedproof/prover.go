package speedproof

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultMinInterval is the least time between two challenges a prover answers.
const DefaultMinInterval = 30 * time.Second

// readTimeout bounds how long a challenge may take to arrive once its stream opened.
const readTimeout = 5 * time.Second

// ProverConfig configures the side of a node that answers challenges.
type ProverConfig struct {
	// Allow says whether peer may challenge this node: the node allows its Raft leader
	// only, so that no other member can make it compute. Nil refuses every peer.
	Allow func(peer.ID) bool
	// MinInterval is the least time between the starts of two answered challenges of one
	// challenger; a challenge sooner, or while one is computed, is refused (its stream
	// reset) before anything is computed. Zero means DefaultMinInterval; negative means no
	// interval. It is counted per challenger: a new leader whose predecessor's proof of
	// this node was lost with its leadership (its commit refused) challenges it at once,
	// where a node-wide interval made it wait out the predecessor's, past the time a job's
	// first plan waits for proofs.
	MinInterval time.Duration
	// Claim is the speed this node claims (GFLOP/s), read when a challenge arrives: the
	// prover gives up on a challenge once the time a verifier waits for it at that claim
	// (Timeout) has passed, since the answer could prove nothing. Nil means no claim:
	// MinTimeout.
	Claim func() float64
	// WriteTimeout bounds sending the answer; zero means readTimeout.
	WriteTimeout time.Duration
	// Log receives refusals and failures; nil discards them.
	Log *slog.Logger
}

// MaxClaimTime bounds what a prover computes for one challenge: no more than this long at
// the speed it claims (ProverConfig.Claim). A verifier sizes its challenges for a fraction
// of a second at the claim; a larger one is refused before anything is computed.
const MaxClaimTime = 3 * time.Second

// Prover answers challenges on ProtocolID: at most one at a time, at most one per
// MinInterval from each challenger, only from peers Allow admits (the Raft leader), each
// bounded by MaxFLOPs and by MaxClaimTime at its own claim. An honest node therefore
// spends at most about MaxClaimTime of its device per MinInterval (10% at the defaults)
// per leader it has in that time; its leader asks for 0.3 s at join and when its claim
// changes.
type Prover struct {
	cfg ProverConfig
	log *slog.Logger

	mu      sync.Mutex
	busy    bool
	last    map[peer.ID]time.Time // each challenger's last answered challenge, within MinInterval
	refused int
}

// NewProver returns a prover; serve its HandleStream on ProtocolID behind admission.
func NewProver(cfg ProverConfig) *Prover {
	if cfg.MinInterval == 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = readTimeout
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Prover{cfg: cfg, log: log.With("component", "speedproof")}
}

// errTooLate is a challenge given up because its answer would come after the verifier's
// Timeout.
var errTooLate = errors.New("speedproof: the answer would come too late")

// errRefused is a challenge this prover will not compute now (not allowed, too soon, busy).
var errRefused = errors.New("speedproof: challenge refused")

// Refused counts the challenges refused so far.
func (p *Prover) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// HandleStream answers one challenge on s, or resets s.
func (p *Prover) HandleStream(s network.Stream) {
	from := s.Conn().RemotePeer()
	if err := p.answer(s, from); err != nil {
		p.log.Debug("challenge not answered", "peer", from, "err", err)
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

func (p *Prover) answer(s network.Stream, from peer.ID) error {
	if p.cfg.Allow == nil || !p.cfg.Allow(from) {
		return p.refuse(errRefused)
	}
	_ = s.SetReadDeadline(time.Now().Add(readTimeout))
	c, err := ReadChallenge(s)
	if err != nil {
		return err
	}
	claim := 0.0
	if p.cfg.Claim != nil {
		claim = p.cfg.Claim()
	}
	if !affordable(c, claim) {
		return p.refuse(fmt.Errorf("%w: %.3g FLOP is more than %v at the claimed %.3g GFLOP/s", errRefused, c.FLOPs(), MaxClaimTime, claim))
	}
	if err := p.begin(from); err != nil {
		return err
	}
	defer p.end()
	hashes, path, ok := SolveUntil(c, time.Now().Add(Timeout(c, claim)))
	if !ok {
		return errTooLate
	}
	b, err := Answer{Path: path, Hashes: hashes}.MarshalBinary()
	if err != nil {
		return err
	}
	_ = s.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout))
	_, err = s.Write(b)
	return err
}

// affordable says whether c takes at most MaxClaimTime at claim GFLOP/s, or is a single
// link of the default shape (what a verifier sends a node claiming next to nothing).
func affordable(c Challenge, claim float64) bool {
	oneLink := Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 1}.FLOPs()
	return c.FLOPs() <= max(oneLink, claim*1e9*MaxClaimTime.Seconds())
}

// begin claims the right to compute one challenge of from now.
func (p *Prover) begin(from peer.ID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if last, ok := p.last[from]; p.busy || ok && now.Sub(last) < p.cfg.MinInterval {
		p.refused++
		return errRefused
	}
	for id, t := range p.last { // only challengers still within their interval are kept
		if now.Sub(t) >= p.cfg.MinInterval {
			delete(p.last, id)
		}
	}
	if p.last == nil {
		p.last = map[peer.ID]time.Time{}
	}
	p.busy, p.last[from] = true, now
	return nil
}

func (p *Prover) end() {
	p.mu.Lock()
	p.busy = false
	p.mu.Unlock()
}

func (p *Prover) refuse(err error) error {
	p.mu.Lock()
	p.refused++
	p.mu.Unlock()
	return err
}

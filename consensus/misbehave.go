package consensus

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A member that sends the leader what no honest member sends (docs/security.md, "A peer
// that breaks the protocol is disconnected") is refused as before and then disconnected:
// the leader answers its RPC with the refusal and closes its libp2p connection, as the
// mesh does for a malformed message. What counts is only what the caller itself authored
// and this node's own checks refuse for its form: an evidence request that does not decode
// or breaks its bounds, evidence the judge cannot decode at all (ErrMalformedEvidence).
// Evidence that decodes but does not convict, is forged or names another epoch's plan is
// a judgement on training, answered by a verdict, never a disconnection: an honest worker
// whose θ a fault corrupted ships such evidence.

// ErrMalformedEvidence marks evidence that does not decode at all (the judge's decoder
// refused it: wrong magic, lengths past their bounds, trailing bytes). The node's judge
// wraps its decoder's error with it; the leader then disconnects the reporter.
var ErrMalformedEvidence = errors.New("malformed offender evidence")

// errMisbehaved marks a refusal after which serveRPC disconnects the caller: it carries no
// wire code of its own (the refusal's sentinel, ErrBadRequest or ErrTooLarge, names it).
var errMisbehaved = errors.New("the peer is disconnected")

// misbehaviour counts the peers this node disconnected for a protocol violation.
type misbehaviour struct{ disconnects atomic.Uint64 }

// Disconnects is how many times this node disconnected a peer that sent it what no honest
// member sends (the misbehaviour above); exported as meshnode_rpc_disconnects_total.
func (c *Consensus) Disconnects() uint64 { return c.misbehaviour.disconnects.Load() }

// misbehaved marks err, a refusal of what from sent, as a violation that disconnects from
// once it is answered (serveRPC, disconnectIf); this node's own calls are only refused.
func (c *Consensus) misbehaved(from peer.ID, err error) error {
	if from == c.host.ID() {
		return err
	}
	return fmt.Errorf("%w (%w)", err, errMisbehaved)
}

// disconnectIf closes peer p's libp2p connections when err marks a violation, counting it
// and logging why.
func (c *Consensus) disconnectIf(p peer.ID, err error) {
	if !errors.Is(err, errMisbehaved) || p == c.host.ID() {
		return
	}
	c.misbehaviour.disconnects.Add(1)
	c.log.Warn("peer sent what no honest member sends; disconnecting", "peer", p, "err", err)
	_ = c.host.Network().ClosePeer(p)
}

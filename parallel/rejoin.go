package parallel

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/mesh/frame"
)

// A member that the control plane retired (it died) comes back into a running DiLoCo or
// streaming group without stopping the survivors, as torchft's healing does: it copies the
// current state from a live member at an outer-step boundary (state_copy.go), trains the
// inner steps from there, and joins the outer steps in two moves that every member decides
// alike (quorum.go's phase 2 carries what each member heard of the joiners):
//
//  1. follow: at each outer step the joiner announces its presence and takes the quorum's
//     result from one designated member (the first member of the quorum that listens to
//     it), as a late member does; it applies the same outer update to the same anchor and
//     momentum, so its weights stay the survivors' bits.
//  2. admission: a member listens to a joiner the control plane readmitted (Readmit); once
//     it heard the joiner's presence at one outer step, it waits for it at the next ones as
//     for a late member (up to the grace window, after a majority of the active members is
//     in). A joiner is admitted at an outer step when every member of the quorum heard it
//     there; every member (the quorum's and the late ones, from the same phase-2 sets)
//     then makes it active, and the designated member tells the joiner so with the result.
//     From the next outer step on it is an ordinary member: its pseudo-gradient counts.
//
// A joiner's own set is never intersected: the members that have not yet readmitted it do
// not announce to it, so its view must not veto them.

// quorumJoin numbers the frames a designated member sends a joiner: the decision
// (a scalar: 1 when admitted) and the outer step's result.
const quorumJoin = 0x3000

// joinHeardWindow bounds how long a member keeps listening for a joiner's presence of an
// outer step after that step's presence round ended without it.
const joinHeardWindow = 30 * time.Second

// readmit marks the retired ids as joining (not yet active) and returns those that were
// retired and are joining now; an active member is left alone.
func (p *peerSet) readmit(ids ...string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range ids {
		if p.retired[id] && !p.joining[id] && !p.banned[id] {
			p.joining[id] = true
			out = append(out, id)
		}
	}
	return out
}

// admit makes joining ids active members.
func (p *peerSet) admit(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		delete(p.retired, id)
		delete(p.joining, id)
		delete(p.heard, id)
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// isJoining reports whether id is a readmitted member not yet admitted.
func (p *peerSet) isJoining(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.joining[id]
}

// wasHeard reports whether joiner id's presence reached this member at an outer step.
func (p *peerSet) wasHeard(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heard[id]
}

// hear records that joiner id's presence arrived.
func (p *peerSet) hear(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.joining[id] {
		p.heard[id] = true
	}
}

// joiningSelf reports whether this worker still follows the quorum as a joiner.
func (p *peerSet) joiningSelf() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.selfJoining
}

func (p *peerSet) setJoiningSelf(v bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.selfJoining = v
}

// Readmit tells the worker that the control plane put retired nodes back into the job's
// plan: they rejoin (a restarted node, or a new one in the dropped replica's place). The
// worker serves each of them a copy of its state at its next outer-step boundary when
// asked (until ctx ends), and admits them into its outer steps' quorum as described above.
// A node not retired is left alone. Safe to call while the worker steps.
func (w *Worker) Readmit(ctx context.Context, nodes ...string) {
	for _, id := range w.peers.readmit(nodes...) {
		go w.listenForCopyRequests(ctx, id)
	}
}

// Joining reports whether the worker still follows its group's outer steps as a joiner
// (JoinFrom), not yet admitted into their quorum.
func (w *Worker) Joining() bool { return w.peers.joiningSelf() }

// joining is the mask of the group's members this member listens to as joiners.
func (q outerQuorum) joining() uint64 {
	var j uint64
	for m, id := range q.g.Members {
		if m != q.g.Self && q.peers.isJoining(id) {
			j |= bit(m)
		}
	}
	return j
}

// listenJoiners listens, beside a presence round, for the presence of the joiners not
// heard yet, and records them as heard when it arrives (up to joinHeardWindow): the next
// outer step waits for them.
func (q outerQuorum) listenJoiners(ctx context.Context, unheard uint64) {
	for m, id := range q.g.Members {
		if unheard&bit(m) == 0 {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), joinHeardWindow)
			defer cancel()
			if _, err := q.recvJoiner(ctx, m, quorumPresence, 0); err == nil {
				q.peers.hear(id)
			}
		}()
	}
}

// recvJoiner is recvFrom for a joiner, which is retired until admitted.
func (q outerQuorum) recvJoiner(ctx context.Context, m, phase, attempt int) (uint64, error) {
	f, err := q.tr.Recv(ctx, q.g.Members[m], frame.Key{Kind: frame.KindScalar, Job: q.k.job, Epoch: q.k.epoch, Step: q.k.step,
		Micro: quorumMicro(phase, attempt, m), Index: q.k.index})
	if err != nil {
		return 0, err
	}
	if len(f.Payload) != 8 {
		return 0, fmt.Errorf("quorum value from %s has %d bytes", q.g.Members[m], len(f.Payload))
	}
	return binary.LittleEndian.Uint64(f.Payload), nil
}

// settleJoiners ends an outer step for the joiners: in is the quorum, sets every member's
// phase-2 sets (by member; the quorum's members' at least) and x the step's result. The
// joiners every member of the quorum heard become active here; the designated member of
// each joiner (the first of the quorum that listens to it) sends it the decision and the
// result in the background.
func (q outerQuorum) settleJoiners(ctx context.Context, in uint64, sets []heldSets, x []float32) {
	admit, listened := ^uint64(0), uint64(0)
	for m := range q.g.Members {
		if in&bit(m) != 0 {
			admit &= sets[m].joined
			listened |= sets[m].listening
		}
	}
	if listened == 0 {
		return
	}
	var admitted []string
	var payload []byte
	for j, id := range q.g.Members {
		if listened&bit(j) == 0 {
			continue
		}
		if admit&bit(j) != 0 {
			admitted = append(admitted, id)
		}
		sender := -1
		for m := range q.g.Members {
			if in&bit(m) != 0 && sets[m].listening&bit(j) != 0 {
				sender = m
				break
			}
		}
		if sender != q.g.Self {
			continue
		}
		if payload == nil {
			payload = appendF32(nil, x)
		}
		decision := uint64(0)
		if admit&bit(j) != 0 {
			decision = 1
		}
		go q.sendDecision(ctx, id, decision, payload, len(x))
	}
	if len(admitted) > 0 {
		q.peers.admit(admitted...)
	}
}

// sendDecision sends joiner id the admission decision and the outer step's result.
func (q outerQuorum) sendDecision(ctx context.Context, id string, decision uint64, payload []byte, n int) {
	tr := q.background()
	f := &frame.Frame{Kind: frame.KindScalar, DType: frame.DTypeU8, Job: q.k.job, Epoch: q.k.epoch, Step: q.k.step,
		Micro: quorumMicro(quorumJoin, 0, q.g.Self), Index: q.k.index, Shape: []int{8}, Payload: binary.LittleEndian.AppendUint64(nil, decision)}
	if tr.Send(ctx, id, f) == nil {
		tr.Send(ctx, id, q.k.frame(frame.KindReduce, quorumJoin|q.g.Self, frame.CodecNone, n, payload)) //nolint:errcheck // the joiner times out and fails
	}
}

// follow is a joiner's outer step: it announces its presence to the active members and
// takes the decision and the result from whichever designated member sends them first
// (the members whose quorum it is not in do not answer). Admitted, it is an ordinary
// member from the next outer step on.
func (q outerQuorum) follow(ctx context.Context, x []float32) error {
	active := q.active()
	q.announce(ctx, active, quorumPresence, 0, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		m        int
		decision uint64
		err      error
	}
	answers, pending := make(chan answer, len(q.g.Members)), 0
	for m := range q.g.Members {
		if m == q.g.Self || active&bit(m) == 0 {
			continue
		}
		pending++
		go func() {
			v, err := q.recvFrom(ctx, m, quorumJoin, 0)
			answers <- answer{m, v, err}
		}()
	}
	var last error = fmt.Errorf("no active member to follow")
	for ; pending > 0; pending-- {
		a := <-answers
		if a.err != nil {
			last = a.err
			continue
		}
		from := q.g.Members[a.m]
		f, err := q.tr.Recv(ctx, from, q.k.frameKey(frame.KindReduce, quorumJoin|a.m))
		if err != nil {
			return fmt.Errorf("outer step as a joiner: the result from %s: %w", from, err)
		}
		if err := decodeF32(x, f.Payload); err != nil {
			return fmt.Errorf("outer step as a joiner: the result from %s: %w", from, err)
		}
		if a.decision == 1 {
			q.peers.setJoiningSelf(false)
		}
		return nil
	}
	return fmt.Errorf("outer step as a joiner: no member sent the quorum's result: %w", last)
}

// dropped reports whether id is retired and not rejoining, and the channel closed at the
// next change.
func (p *peerSet) dropped(id string) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retired[id] && !p.joining[id], p.changed
}

// untilDropped returns ctx, cancelled as well once id is retired and not rejoining.
func (p *peerSet) untilDropped(ctx context.Context, id string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			gone, changed := p.dropped(id)
			if gone {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return ctx, cancel
}

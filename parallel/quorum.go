package parallel

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/mesh/frame"
)

// An outer step (DiLoCo's, or one fragment's in streaming DiLoCo) runs over the replicas
// that are there, not over the plan's: a quorum per outer step, a grace window for late
// members, and an agreement on the contributions every survivor applies, so that the
// survivors of a lost replica keep training with bit-identical weights instead of
// restarting from a checkpoint (torchft's per-step quorum, Decoupled DiLoCo's grace
// window). One collective, three phases, all on the group of the plan the worker was built
// with:
//
//  1. presence: every member announces itself to every active member (not retired by the
//     control plane) and waits for theirs, until each arrived or was retired; once a
//     majority of the active members is in, it waits at most the grace window for the
//     rest. Fewer than a majority is an error: a minority never trains on alone.
//  2. agreement: every member announces the set it holds to every active member and waits
//     for the set of each member it holds (until it arrives or that member is retired);
//     the quorum is the intersection of the sets it got. Every member of the quorum holds
//     the same sets, so they compute the same quorum; a member left out (late) gets the
//     others' sets too and computes it as well.
//  3. the collective proper (allReduceMean) over the quorum alone, its contributions
//     re-weighted by the quorum's batch shares; the quorum's first member sends the result
//     to the active members left out, which take it as theirs.
//
// With every member present the quorum is the whole group and phase 3 is the collective of
// a plan without failures, bit for bit. A member retired while phase 3 runs cancels it;
// the member then takes the result of one that finished phase 3 before the death
// (serveFinished, askFinished), or, when none did, the three phases run again (an attempt,
// with its own frame keys) without the dead member.

// maxQuorumMembers bounds the groups whose outer steps run by quorum: a set of members is
// a 64-bit mask. Larger groups run the plain collective.
const maxQuorumMembers = 64

// maxQuorumAttempts bounds how often an outer step is run again after a member of its
// quorum was retired mid-collective.
const maxQuorumAttempts = 8

// Frame numbers of the quorum's phases (frame.Key.Micro of scalar frames, and the round of
// the result's reduce frame): the phase, the attempt and the sending member.
const (
	quorumPresence = 0x4000
	quorumHeld     = 0x5000
	quorumResult   = 0x6000
	quorumAsk      = 0x7000 // a retrying member asks for a finished member's result
)

// askWindow is how long a member whose collective broke waits for a member that finished
// it to hand over its result, before it runs the step again with those still in it.
const askWindow = time.Second

func quorumMicro(phase, attempt, member int) uint16 {
	return uint16(phase | (attempt&0x3f)<<6 | member&0x3f)
}

// attemptIndexStride separates the frame indices (a run's first layer) of a retried
// collective from the first attempt's.
const attemptIndexStride = 0x400

// peerSet is what the control plane told a worker about the plan's members: the ones it
// retired (removed from the job's plan because they died). It is safe for concurrent use:
// the node retires members while collectives wait on them.
type peerSet struct {
	mu      sync.Mutex
	retired map[string]bool
	// banned are retired members never to be readmitted in this worker's run: an audit
	// proved they sent what they did not compute (audit.go). Every-step sync's gathers run
	// without them (activeGroup).
	banned map[string]bool
	// joining are retired members the control plane readmitted (rejoin.go): still retired
	// for every wait and count until an outer step's quorum admits them; heard are those
	// whose presence reached this member at an outer step; selfJoining says this worker
	// itself joins and follows the quorum's results until admitted.
	joining     map[string]bool
	heard       map[string]bool
	selfJoining bool
	changed     chan struct{}                 // closed and replaced at every change
	serves      map[uint16]context.CancelFunc // per run (its frame index): the result served
}

func newPeerSet() *peerSet {
	return &peerSet{retired: map[string]bool{}, banned: map[string]bool{}, joining: map[string]bool{}, heard: map[string]bool{}, changed: make(chan struct{}), serves: map[uint16]context.CancelFunc{}}
}

// serving returns ctx for serving a run's latest result, and ends the serving of the run's
// previous one.
func (p *peerSet) serving(ctx context.Context, run uint16) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev := p.serves[run]; prev != nil {
		prev()
	}
	p.serves[run] = cancel
	return ctx
}

// retire records ids as retired and wakes every wait on them.
func (p *peerSet) retire(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, id := range ids {
		if p.joining[id] {
			n++ // a joiner dropped again: its listeners stop
		}
		delete(p.joining, id)
		delete(p.heard, id)
		if !p.retired[id] {
			p.retired[id], n = true, n+1
		}
	}
	if n > 0 {
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// ban retires ids for the rest of the run: readmit passes over them.
func (p *peerSet) ban(ids ...string) {
	p.mu.Lock()
	for _, id := range ids {
		p.banned[id] = true
	}
	p.mu.Unlock()
	p.retire(ids...)
}

// isBanned reports whether id is banned.
func (p *peerSet) isBanned(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.banned[id]
}

// anyRetired reports whether one of ids is retired, and the channel closed at the next change.
func (p *peerSet) anyRetired(ids ...string) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if p.retired[id] {
			return true, p.changed
		}
	}
	return false, p.changed
}

// untilRetired returns ctx, cancelled as well once one of ids is retired.
func (p *peerSet) untilRetired(ctx context.Context, ids ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			gone, changed := p.anyRetired(ids...)
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

// outerQuorum is one outer collective of a run's group over the members that are there.
type outerQuorum struct {
	tr      Transport // the collective's, which may count what it sends for the worker
	bg      Transport // for sends from goroutines, safe for concurrent use (nil: tr)
	g       Group
	k       roundKey
	peers   *peerSet
	grace   time.Duration // 0: no window, wait for every active member
	adapt   *graceWindow  // told what each windowed presence phase measured (nil: nothing)
	batches []int         // each member's batch (the group is in replica order)
	reject  func(Rejection)
	ask     time.Duration // how long askFinished waits (0: askWindow)
}

func bit(m int) uint64 { return 1 << uint(m) }

// background is the transport of the sends that goroutines make beside the worker's step.
func (q outerQuorum) background() Transport {
	if q.bg != nil {
		return q.bg
	}
	return q.tr
}

// active is the mask of the members not retired; this member is always active.
func (q outerQuorum) active() uint64 {
	var a uint64
	for m, id := range q.g.Members {
		if gone, _ := q.peers.anyRetired(id); !gone || m == q.g.Self {
			a |= bit(m)
		}
	}
	return a
}

// reduce replaces x by the aggregate of the quorum's contributions (allReduceMean on the
// quorum, re-weighted by its batch shares), the same bits on every member of the quorum
// and on every active member left out of it.
func (q outerQuorum) reduce(ctx context.Context, x []float32, ef *ErrorFeedback, pol policy) error {
	R := len(q.g.Members)
	if R <= 1 {
		return nil
	}
	if R > maxQuorumMembers {
		return allReduceMean(ctx, q.tr, q.g, q.k, x, ef, pol)
	}
	if q.peers.joiningSelf() {
		return q.follow(ctx, x)
	}
	own := slices.Clone(x)
	for attempt := range maxQuorumAttempts {
		in, sets, err := q.agree(ctx, attempt)
		if err != nil {
			return err
		}
		q.reportLeftOut(in)
		if in&bit(q.g.Self) == 0 {
			if err := q.recvResult(ctx, attempt, in, x); err != nil {
				return err
			}
			q.settleJoiners(ctx, in, sets, x)
			return nil
		}
		copy(x, own)
		sub := q.subgroup(in)
		k := q.k
		k.index += uint16(attempt * attemptIndexStride)
		rctx, cancel := q.peers.untilRetired(ctx, sub.Members...)
		err = allReduceMean(rctx, q.tr, sub, k, x, ef, pol)
		cancel()
		if err != nil {
			if gone, _ := q.peers.anyRetired(sub.Members...); gone && ctx.Err() == nil {
				// A member of the quorum died mid-collective. Members that finished it
				// before hand over their result; without one, again without the dead.
				if q.askFinished(ctx, x) {
					return nil
				}
				continue
			}
			return err
		}
		q.renormalise(x, in)
		if sub.Self == 0 {
			q.sendResult(ctx, attempt, in, x)
		}
		q.serveFinished(ctx, x)
		q.settleJoiners(ctx, in, sets, x)
		return nil
	}
	return fmt.Errorf("no outer step after %d attempts: members kept leaving", maxQuorumAttempts)
}

// serveFinished keeps this member's result of the outer step at hand for a member of the
// quorum whose collective broke when another died (it finished before this one got its
// last chunk): such a member asks (askFinished) instead of running the step again alone.
// It serves until this run's next outer step finishes or the stall timeout.
func (q outerQuorum) serveFinished(ctx context.Context, x []float32) {
	ctx = q.peers.serving(context.WithoutCancel(ctx), q.k.index)
	payload := appendF32(nil, x)
	for m, id := range q.g.Members {
		if m == q.g.Self {
			continue
		}
		go func() {
			if _, err := q.recvFrom(ctx, m, quorumAsk, 0); err == nil {
				sendPieces(ctx, q.background(), id, q.k.frame(frame.KindReduce, quorumAsk|q.g.Self, frame.CodecNone, len(x), payload)) //nolint:errcheck
			}
		}()
	}
}

// askFinished asks every active member for its result of the outer step and takes the
// first that comes within askWindow into x; false when none did (none finished).
// A member that finished answers at once, so the window only bounds the wait when none did.
func (q outerQuorum) askFinished(ctx context.Context, x []float32) bool {
	active := q.active()
	q.announce(ctx, active, quorumAsk, 0, 1)
	wait := q.ask
	if wait <= 0 {
		wait = askWindow
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	results, pending := make(chan []float32, len(q.g.Members)), 0
	for m, id := range q.g.Members {
		if m == q.g.Self || active&bit(m) == 0 {
			continue
		}
		pending++
		go func() {
			f, err := recvPieces(ctx, q.tr, id, q.k.frameKey(frame.KindReduce, quorumAsk|m), 4*len(x))
			v := make([]float32, len(x))
			if err != nil || decodeF32(v, f.Payload) != nil {
				v = nil
			}
			results <- v
		}()
	}
	for ; pending > 0; pending-- {
		if v := <-results; v != nil {
			copy(x, v)
			return true
		}
	}
	return false
}

// reportLeftOut reports the active members the quorum does without (a retired one is
// reported no more).
func (q outerQuorum) reportLeftOut(in uint64) {
	if q.reject == nil {
		return
	}
	out := q.active() &^ in
	for m, id := range q.g.Members {
		if out&bit(m) != 0 {
			q.reject(Rejection{Member: id, Reason: "not in the outer step's quorum (dead, retired or late)", Late: true})
		}
	}
}

// heldSets is what a member announces in phase 2: the active members it heard (held), the
// joiners it listens to (listening) and the joiners it heard at this outer step (joined).
type heldSets struct{ held, listening, joined uint64 }

// heldSetsSize is the payload of a phase-2 frame: three little-endian masks.
const heldSetsSize = 24

func (h heldSets) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, h.held)
	b = binary.LittleEndian.AppendUint64(b, h.listening)
	return binary.LittleEndian.AppendUint64(b, h.joined)
}

// parseHeldSets decodes a phase-2 payload, which must be heldSetsSize bytes.
func parseHeldSets(b []byte) (heldSets, error) {
	if len(b) != heldSetsSize {
		return heldSets{}, fmt.Errorf("quorum sets have %d bytes, want %d", len(b), heldSetsSize)
	}
	return heldSets{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}, nil
}

// agree runs phases 1 and 2: the quorum's mask, and the phase-2 sets of the members this
// member heard (indexed by member).
func (q outerQuorum) agree(ctx context.Context, attempt int) (uint64, []heldSets, error) {
	held, joined, err := q.presence(ctx, attempt)
	if err != nil {
		return 0, nil, err
	}
	return q.intersect(ctx, attempt, heldSets{held: held, listening: q.joining(), joined: joined})
}

// joinerWait bounds the wait for a joiner heard before when the group has no grace window.
const joinerWait = 2 * time.Second

// presence is phase 1: the mask of the active members that announced themselves, and of
// the joiners heard at an earlier outer step that announced themselves in time (only the
// first attempt waits for joiners; the others are listened to for the next outer step).
func (q outerQuorum) presence(ctx context.Context, attempt int) (held, joined uint64, err error) {
	me, active := q.g.Self, q.active()
	need := bits.OnesCount64(active)/2 + 1
	q.announce(ctx, active, quorumPresence, attempt, 1)
	var awaited uint64
	if attempt == 0 {
		var unheard uint64
		for m, id := range q.g.Members {
			if q.joining()&bit(m) == 0 {
				continue
			}
			if q.peers.wasHeard(id) {
				awaited |= bit(m)
			} else {
				unheard |= bit(m)
			}
		}
		q.listenJoiners(ctx, unheard)
	}
	type arrival struct {
		m  int
		ok bool
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, pending, activePending := make(chan arrival, len(q.g.Members)), 0, 0
	for m := range q.g.Members {
		if m == me || (active|awaited)&bit(m) == 0 {
			continue
		}
		pending++
		if awaited&bit(m) != 0 {
			go func() {
				_, err := q.recvJoiner(wctx, m, quorumPresence, attempt)
				ch <- arrival{m, err == nil}
			}()
			continue
		}
		activePending++
		go func() {
			_, err := q.recvFrom(wctx, m, quorumPresence, attempt)
			ch <- arrival{m, err == nil}
		}()
	}
	held = bit(me)
	var grace *time.Timer
	var windowed bool            // the grace window was armed (q.grace > 0)
	var majority, last time.Time // when it was, and when the last active member came
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for pending > 0 {
		if grace == nil && bits.OnesCount64(held) >= need {
			if q.grace > 0 {
				grace = time.AfterFunc(q.grace, stop) // the rest are late: stop waiting for them
				windowed, majority = true, time.Now()
			} else if activePending == 0 {
				grace = time.AfterFunc(joinerWait, stop) // only joiners are left
			}
		}
		a := <-ch
		pending--
		switch {
		case awaited&bit(a.m) != 0:
			if a.ok {
				joined |= bit(a.m)
			}
		default:
			activePending--
			if a.ok {
				held |= bit(a.m)
				last = time.Now()
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if still := q.active() & active; still != active {
		// The members retired during the round count no more: a group of two goes on
		// alone once the control plane retired the other.
		active, need = still, bits.OnesCount64(still)/2+1
	}
	if windowed {
		q.adapt.observe(max(last.Sub(majority), 0), active&^held != 0) // grace.go
	}
	if n := bits.OnesCount64(held); n < need {
		return 0, 0, fmt.Errorf("outer step: %d of the %d active members present, a quorum is %d", n, bits.OnesCount64(active), need)
	}
	return held, joined, nil
}

// intersect is phase 2: announce this member's sets, and intersect its held set with the
// held set of every member in it (one retired meanwhile is passed over). It returns the
// quorum and the sets received (with this member's own), by member.
func (q outerQuorum) intersect(ctx context.Context, attempt int, own heldSets) (uint64, []heldSets, error) {
	me := q.g.Self
	q.announceBytes(ctx, q.active(), quorumHeld, attempt, own.append(nil))
	sets := make([]heldSets, len(q.g.Members))
	sets[me] = own
	in := own.held
	for m := range q.g.Members {
		if m == me || own.held&bit(m) == 0 {
			continue
		}
		v, err := q.recvSets(ctx, m, attempt)
		if err != nil {
			if gone, _ := q.peers.anyRetired(q.g.Members[m]); gone && ctx.Err() == nil {
				continue
			}
			return 0, nil, fmt.Errorf("outer step: the set %s holds: %w", q.g.Members[m], err)
		}
		sets[m] = v
		in &= v.held
	}
	return in, sets, nil
}

// recvSets waits for member m's phase-2 sets, until they arrive, ctx ends or m is retired.
func (q outerQuorum) recvSets(ctx context.Context, m, attempt int) (heldSets, error) {
	id := q.g.Members[m]
	ctx, cancel := q.peers.untilRetired(ctx, id)
	defer cancel()
	f, err := q.tr.Recv(ctx, id, frame.Key{Kind: frame.KindScalar, Job: q.k.job, Epoch: q.k.epoch, Step: q.k.step,
		Micro: quorumMicro(quorumHeld, attempt, m), Index: q.k.index})
	if err != nil {
		return heldSets{}, err
	}
	s, err := parseHeldSets(f.Payload)
	if err != nil {
		return heldSets{}, fmt.Errorf("%s: %w", id, err)
	}
	return s, nil
}

// announce sends v to every active member but this one, each in the background: a member
// that died but is not retired yet must not hold the others up.
func (q outerQuorum) announce(ctx context.Context, active uint64, phase, attempt int, v uint64) {
	q.announceBytes(ctx, active, phase, attempt, binary.LittleEndian.AppendUint64(nil, v))
}

// announceBytes is announce with any payload.
func (q outerQuorum) announceBytes(ctx context.Context, active uint64, phase, attempt int, payload []byte) {
	for m, id := range q.g.Members {
		if m == q.g.Self || active&bit(m) == 0 {
			continue
		}
		f := &frame.Frame{Kind: frame.KindScalar, DType: frame.DTypeU8, Job: q.k.job, Epoch: q.k.epoch, Step: q.k.step,
			Micro: quorumMicro(phase, attempt, q.g.Self), Index: q.k.index, Shape: []int{len(payload)}, Payload: payload}
		go q.background().Send(ctx, id, f) //nolint:errcheck // a lost announcement is a member not heard from
	}
}

// recvFrom waits for member m's value of phase, until it arrives, ctx ends or m is retired.
func (q outerQuorum) recvFrom(ctx context.Context, m, phase, attempt int) (uint64, error) {
	id := q.g.Members[m]
	ctx, cancel := q.peers.untilRetired(ctx, id)
	defer cancel()
	f, err := q.tr.Recv(ctx, id, frame.Key{Kind: frame.KindScalar, Job: q.k.job, Epoch: q.k.epoch, Step: q.k.step,
		Micro: quorumMicro(phase, attempt, m), Index: q.k.index})
	if err != nil {
		return 0, err
	}
	if len(f.Payload) != 8 {
		return 0, fmt.Errorf("quorum value from %s has %d bytes", id, len(f.Payload))
	}
	return binary.LittleEndian.Uint64(f.Payload), nil
}

// subgroup is the group of the quorum's members, in the group's order.
func (q outerQuorum) subgroup(in uint64) Group {
	var sub Group
	for m, id := range q.g.Members {
		if in&bit(m) == 0 {
			continue
		}
		if m == q.g.Self {
			sub.Self = len(sub.Members)
		}
		sub.Members = append(sub.Members, id)
	}
	return sub
}

// renormalise turns the quorum's plain mean of contributions weighed by R·batch/global
// (Worker.weigh) into their mean weighted by the quorum's batches: × |Q|·global / (R·Σ_Q
// batch). With the whole group, or equal batches, the factor is 1 and x is untouched.
func (q outerQuorum) renormalise(x []float32, in uint64) {
	var global, quorum float64
	for m, b := range q.batches {
		global += float64(b)
		if in&bit(m) != 0 {
			quorum += float64(b)
		}
	}
	R, n := float64(len(q.g.Members)), float64(bits.OnesCount64(in))
	f := float32(n * global / (R * quorum))
	if f == 1 {
		return
	}
	for i := range x {
		x[i] *= f
	}
}

// sendResult sends the quorum's result to every active member left out of it, in the
// background (such a member may be dead and not retired yet).
func (q outerQuorum) sendResult(ctx context.Context, attempt int, in uint64, x []float32) {
	out := q.active() &^ in
	if out == 0 {
		return
	}
	payload := appendF32(nil, x)
	for m, id := range q.g.Members {
		if out&bit(m) != 0 {
			go sendPieces(ctx, q.background(), id, q.k.frame(frame.KindReduce, quorumResult|attempt, frame.CodecNone, len(x), payload)) //nolint:errcheck
		}
	}
}

// recvResult takes the result of a quorum this member is not in from the quorum's first
// member.
func (q outerQuorum) recvResult(ctx context.Context, attempt int, in uint64, x []float32) error {
	if in == 0 {
		return fmt.Errorf("outer step: an empty quorum")
	}
	from := q.g.Members[bits.TrailingZeros64(in)]
	ctx, cancel := q.peers.untilRetired(ctx, from)
	defer cancel()
	f, err := recvPieces(ctx, q.tr, from, q.k.frameKey(frame.KindReduce, quorumResult|attempt), 4*len(x))
	if err != nil {
		return fmt.Errorf("outer step left out of the quorum: the result from %s: %w", from, err)
	}
	return decodeF32(x, f.Payload)
}

package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Offender evidence travels from the worker that dropped a member to the leader over the
// RPC channel (authenticated by the libp2p connection; docs/security.md, "Verifiable
// offender evidence"). The leader checks it with a judge the node installs
// (SetEvidenceJudge: parallel.VerifyEvidence on the job's model and data) and commits
// its verdict itself (RecordVerdict): the reporter's word is never written as a verdict.

// MaxEvidenceBytes bounds evidence carried inside the RPC message: what fits an RPC
// request once encoded (base64 in JSON). A larger evidence (a model over ~90k weights
// with four replicas) travels as a blob: the message names it (Blob, Size) and the leader
// fetches it from the reporter (EvidenceFetcher).
const MaxEvidenceBytes = (MaxRPCRequestBytes - 64<<10) * 3 / 4

// MaxEvidenceBlobBytes is the ceiling on an evidence blob's announced size, before any
// job-specific bound (the node's EvidenceFetcher derives one from the job's model): above
// any evidence a worker keeps (parallel.MaxKeptEvidenceBytes, 256 MiB) once encoded.
const MaxEvidenceBlobBytes int64 = 512 << 20

// EvidenceBlobTimeout bounds the leader's fetch and judgement of one evidence blob, which
// run after the RPC that announced it has answered (a large blob and the judge's forward
// passes need longer than an RPC's timeout); the reporter serves the blob for longer.
const EvidenceBlobTimeout = 5 * time.Minute

// maxEvidenceBlobID bounds the length of a blob ID in an evidence message (a blob ID is
// 64 hex digits; the fetcher checks its form).
const maxEvidenceBlobID = 128

// EvidenceInterval is how often one reporter may have evidence judged: a check costs the
// leader a forward pass per contribution and held-out window.
const EvidenceInterval = 10 * time.Second

// ErrBusy means the leader refused a request for its rate: one in flight per reporter, and
// one per EvidenceInterval.
var ErrBusy = errors.New("too many requests from this peer")

// EvidenceRequest ships a worker's evidence against Member of job JobID: either the bytes
// of a parallel.Evidence (Evidence, at most MaxEvidenceBytes) or the content hash and size
// of a blob holding them on the reporter (Blob, Size), never both.
type EvidenceRequest struct {
	JobID    string `json:"job_id"`
	Member   string `json:"member"`
	Evidence []byte `json:"evidence,omitempty"`
	Blob     string `json:"blob,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// EvidenceFetcher brings the evidence blob reporter announced (its content hash and size)
// from reporter to this node and returns its bytes, verified against the hash: the node
// installs one that bounds the size by job j's model, fetches only from reporter and drops
// the blob once read.
type EvidenceFetcher func(ctx context.Context, j Job, reporter peer.ID, blob string, size int64) ([]byte, error)

// EvidenceJudge checks evidence reporter shipped against member of job j: convicted when
// the leader's recomputation drops member; false with the reason when the evidence does
// not convict or is forged (a false accusation); an error when it cannot be checked at
// all (malformed, or the leader cannot load the job's data).
type EvidenceJudge func(ctx context.Context, j Job, reporter, member string, evidence []byte) (convicted bool, reason string, err error)

// evidenceDesk is the leader's judge and the time each reporter last had evidence judged.
type evidenceDesk struct {
	mu    sync.Mutex
	judge EvidenceJudge
	fetch EvidenceFetcher
	last  map[peer.ID]time.Time
	busy  map[peer.ID]bool

	closed bool           // set by Shutdown: no more background judgements
	wg     sync.WaitGroup // background judgements of evidence blobs
}

// SetEvidenceJudge installs the judge this node uses when it leads; without one, evidence
// is refused.
func (c *Consensus) SetEvidenceJudge(j EvidenceJudge) {
	c.evidence.mu.Lock()
	defer c.evidence.mu.Unlock()
	c.evidence.judge = j
}

// SetEvidenceFetcher installs how this node, leading, fetches evidence shipped as a blob;
// without one such evidence is refused.
func (c *Consensus) SetEvidenceFetcher(f EvidenceFetcher) {
	c.evidence.mu.Lock()
	defer c.evidence.mu.Unlock()
	c.evidence.fetch = f
}

// fetcher is the installed EvidenceFetcher, nil when none is.
func (d *evidenceDesk) fetcher() EvidenceFetcher {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fetch
}

// ShipEvidenceBlob asks the leader to judge the evidence against member of job jobID
// that this node holds as blob (size bytes). The leader answers once it has taken the
// request up, then fetches the blob from this node and judges it in the background within
// EvidenceBlobTimeout: the caller serves blob to the leader for longer than that.
func (c *Consensus) ShipEvidenceBlob(ctx context.Context, jobID, member, blob string, size int64) error {
	req := EvidenceRequest{JobID: jobID, Member: member, Blob: blob, Size: size}
	if err := req.check(); err != nil {
		return err
	}
	return c.do(ctx, "evidence", req, nil)
}

// ShipEvidence sends evidence against member of job jobID to the leader, which judges it
// and commits its verdict.
func (c *Consensus) ShipEvidence(ctx context.Context, jobID, member string, evidence []byte) error {
	if len(evidence) > MaxEvidenceBytes {
		return fmt.Errorf("evidence of %d bytes (max %d): %w", len(evidence), MaxEvidenceBytes, ErrTooLarge)
	}
	return c.do(ctx, "evidence", EvidenceRequest{JobID: jobID, Member: member, Evidence: evidence}, nil)
}

// take admits one judgement for reporter now, or refuses it (ErrBusy); done ends it.
func (d *evidenceDesk) take(reporter peer.ID, now time.Time) (EvidenceJudge, func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.judge == nil {
		return nil, nil, fmt.Errorf("%w: this leader judges no evidence", ErrForbidden)
	}
	if d.last == nil {
		d.last, d.busy = map[peer.ID]time.Time{}, map[peer.ID]bool{}
	}
	if d.busy[reporter] || now.Sub(d.last[reporter]) < EvidenceInterval {
		return nil, nil, fmt.Errorf("%w: evidence from %s judged less than %s ago", ErrBusy, reporter, EvidenceInterval)
	}
	d.busy[reporter], d.last[reporter] = true, now
	if len(d.last) > 4*MaxSpeedProofs { // bounded: forget the oldest reporters
		for id, t := range d.last {
			if now.Sub(t) >= EvidenceInterval && !d.busy[id] {
				delete(d.last, id)
			}
		}
	}
	return d.judge, func() {
		d.mu.Lock()
		delete(d.busy, reporter)
		d.mu.Unlock()
	}, nil
}

func (c *Consensus) handleEvidence(ctx context.Context, from peer.ID, body []byte) (any, error) {
	if len(body) > MaxRPCRequestBytes {
		return nil, ErrTooLarge
	}
	args, err := decodeEvidenceRequest(body)
	if err != nil {
		return nil, c.misbehaved(from, err) // no honest reporter sends it
	}
	j, _, err := c.fsm.Job(args.JobID)
	if err != nil {
		return nil, err
	}
	if j.Status.Terminal() {
		return nil, fmt.Errorf("job %s is %s: %w", args.JobID, j.Status, ErrJobFinished)
	}
	// Reporter and accused must have shared one of the job's recorded plans (the judge
	// then holds the evidence to the plan of its own epoch): the plan that follows a first
	// conviction may leave out the reporter of the evidence against a second colluder, or
	// hold that colluder alone, and evidence refused for the current plan left it there.
	if !sharedAPlan(j, from.String(), args.Member, from == c.host.ID()) {
		return nil, fmt.Errorf("%w: %s and %q were never two nodes of one plan of job %s", ErrForbidden, from, args.Member, args.JobID)
	}
	p := j.CurrentPlan()
	judge, done, err := c.evidence.take(from, now())
	if err != nil {
		return nil, err
	}
	if args.Blob != "" {
		return struct{}{}, c.judgeBlobLater(j, p.Epoch, from, args, judge, done)
	}
	defer done()
	return struct{}{}, c.judgeEvidence(ctx, j, p.Epoch, from, args.Member, args.Evidence, judge)
}

// judgeEvidence judges evidence from reporter against member of job j and commits the
// verdict, convicting or naming the false accuser.
func (c *Consensus) judgeEvidence(ctx context.Context, j Job, epoch uint64, from peer.ID, member string, evidence []byte, judge EvidenceJudge) error {
	convicted, reason, err := judge(ctx, j, from.String(), member, evidence)
	if err != nil {
		refused := fmt.Errorf("%w: evidence against %s: %v", ErrBadRequest, member, err)
		if errors.Is(err, ErrMalformedEvidence) { // it does not decode: no honest worker ships it
			return c.misbehaved(from, refused)
		}
		return refused
	}
	reason = truncate(reason, maxMessageLen) // as RecordVerdict commits it, and for the log
	v := Verdict{Member: member, Accuser: from.String(), Convicted: convicted, Epoch: epoch, Reason: reason}
	if !convicted {
		c.log.Warn("false offender accusation", "job", j.ID, "accuser", from, "member", member, "reason", reason)
	}
	return c.RecordVerdict(ctx, j.ID, v)
}

// judgeBlobLater fetches and judges an evidence blob in the background, within
// EvidenceBlobTimeout, holding the reporter's one judgement in flight until it ends (done).
// A blob that cannot be fetched is refused evidence: logged, nothing judged, no verdict.
func (c *Consensus) judgeBlobLater(j Job, epoch uint64, from peer.ID, args EvidenceRequest, judge EvidenceJudge, done func()) error {
	fetch := c.evidence.fetcher()
	if fetch == nil {
		done()
		return fmt.Errorf("%w: this leader fetches no evidence blobs", ErrForbidden)
	}
	d := &c.evidence
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		done()
		return ErrShutdown
	}
	d.wg.Go(func() {
		defer done()
		ctx, cancel := context.WithTimeout(c.baseCtx, EvidenceBlobTimeout)
		defer cancel()
		ev, err := fetch(ctx, j, from, args.Blob, args.Size)
		if err == nil {
			err = c.judgeEvidence(ctx, j, epoch, from, args.Member, ev, judge)
		} else {
			err = fmt.Errorf("evidence blob refused: %w", err)
		}
		if err != nil {
			c.log.Warn("offender evidence blob", "job", j.ID, "reporter", from, "member", args.Member, "blob", args.Blob, "err", err)
			c.disconnectIf(from, err) // a blob the reporter published that does not decode
		}
	})
	return nil
}

// closeEvidence ends background judgements: none starts after it, and it waits for
// those running (their context is the node's, cancelled by Shutdown).
func (c *Consensus) closeEvidence() {
	c.evidence.mu.Lock()
	c.evidence.closed = true
	c.evidence.mu.Unlock()
	c.evidence.wg.Wait()
}

// decodeEvidenceRequest decodes and checks an evidence message (its length is checked by
// the caller): refused with ErrBadRequest or ErrTooLarge naming the field.
func decodeEvidenceRequest(body []byte) (EvidenceRequest, error) {
	args, err := decodeArgs[EvidenceRequest](body)
	if err != nil {
		return args, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return args, args.check()
}

// check refuses an evidence message that carries both inline bytes and a blob, neither,
// or sizes past their bounds.
func (r EvidenceRequest) check() error {
	switch {
	case len(r.Evidence) > MaxEvidenceBytes:
		return fmt.Errorf("evidence of %d bytes (max %d): %w", len(r.Evidence), MaxEvidenceBytes, ErrTooLarge)
	case r.Blob == "" && r.Size != 0:
		return fmt.Errorf("%w: size %d without a blob", ErrBadRequest, r.Size)
	case r.Blob == "":
		return nil
	case len(r.Evidence) > 0:
		return fmt.Errorf("%w: both evidence bytes and blob %.16q", ErrBadRequest, r.Blob)
	case len(r.Blob) > maxEvidenceBlobID:
		return fmt.Errorf("%w: blob ID of %d characters (max %d)", ErrBadRequest, len(r.Blob), maxEvidenceBlobID)
	case r.Size <= 0:
		return fmt.Errorf("%w: evidence blob size %d", ErrBadRequest, r.Size)
	case r.Size > MaxEvidenceBlobBytes:
		return fmt.Errorf("evidence blob of %d bytes (max %d): %w", r.Size, MaxEvidenceBlobBytes, ErrTooLarge)
	}
	return nil
}

// sharedAPlan says reporter and member are two nodes of one of j's recorded plans (the
// bounded history, MaxPlansPerJob); self (the leader reporting) needs only member to be
// a node of one.
func sharedAPlan(j Job, reporter, member string, self bool) bool {
	if reporter == member {
		return false
	}
	for _, p := range j.Plans {
		nodes := planNodes(p.Plan)
		if slices.Contains(nodes, member) && (self || slices.Contains(nodes, reporter)) {
			return true
		}
	}
	return false
}

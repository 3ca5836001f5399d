package parallel

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Commit before reveal (docs/security.md, "Echoing an honest member"). The checks of a
// gather weigh each contribution against the others (the coordinate-wise median and the
// distances to it), so a member that could read the others' contributions before sending
// its own could shape it by them: two colluders of four that echo one honest member's
// contribution with a little noise make the median that member's and the reference
// distance their noise, and the other honest member is dropped and named by a majority.
// Nothing in the transport makes a member send before it reads; so, in a gather of three
// or more, every member first sends each other member the SHA-256 of the exact bytes it
// will send it (signature included), and sends those bytes only once it holds every other
// member's commitment. A contribution whose bytes differ from its author's commitment is
// dropped, named and reported as misbehaviour: no honest member sends it. What it costs:
// 32 bytes per peer and one more one-way latency per gather (docs/PERFORMANCE.md, "Commit
// before reveal"). It does not stop a replay of what a member saw in earlier gathers;
// audits do (audit.go; docs/security.md, "Replaying what was seen: audits"), and they
// draw from the committed contributions, which none could then choose to dodge the draw.

// commitRound numbers the commitment frames of a gather: round commitRound+base+i carries
// member i's commitment to the contribution of round base+i. Below the quorum's phases
// (0x3000 up) and above every gather's contribution and result rounds.
const commitRound = 0x2000

// minCommitMembers is the smallest gather that commits before it reveals: the checks that
// weigh contributions against one another need three (outliers, dropByScore). A variable
// only so that BenchmarkGather can measure a gather without the commitment.
var minCommitMembers = 3

// contributionAlterer is a transport whose member runs altered code that changes the
// contribution it sends to `to` before it commits to it: the engine's tests' attackers
// implement it (a colluder that scales, re-signs or equivocates stands by what it
// sends); no node's transport does. The engine's own wrappers pass it through
// (alterContribution).
type contributionAlterer interface {
	AlterContribution(ctx context.Context, to string, f *frame.Frame) (*frame.Frame, error)
}

// alterContribution is f as tr's member sends it to `to` (contributionAlterer): f itself
// on every honest member.
func alterContribution(ctx context.Context, tr Transport, to string, f *frame.Frame) (*frame.Frame, error) {
	if a, ok := tr.(contributionAlterer); ok {
		return a.AlterContribution(ctx, to, f)
	}
	return f, nil
}

// committedKey marks the context of the sends that reveal committed contributions: a
// transport that alters what it sends (contributionAlterer) has altered them already.
type committedKey struct{}

// commitContributions is the commit half of a gather of three or more members: out holds
// the frame this member sends each other member (nil at its own position), which it
// replaces by what the member really sends (alterContribution); it sends each member the
// digest of its frame's payload and returns every other member's commitment to this one,
// with the context to reveal in. A commitment that is not a 32-byte digest is what no
// honest member sends: its author is reported (bad) and its contribution will be dropped.
// Fewer than three members commit nothing (nil commitments).
func commitContributions(ctx context.Context, tr Transport, g Group, k roundKey, base int, out []*frame.Frame, bad []error) (context.Context, [][sha256.Size]byte, error) {
	R := len(g.Members)
	if R < minCommitMembers {
		return ctx, nil, nil
	}
	var sum [sha256.Size]byte
	var hashed []byte // the payload sum is of: an honest member sends every peer the same bytes, hashed once
	for m, f := range out {
		if f == nil {
			continue
		}
		a, err := alterContribution(ctx, tr, g.Members[m], f)
		if err != nil {
			return ctx, nil, err
		}
		out[m] = a
		if hashed == nil || !sameBytes(hashed, a.Payload) {
			sum, hashed = sha256.Sum256(a.Payload), a.Payload
		}
		c := k.frame(frame.KindReduce, commitRound+base+g.Self, frame.CodecNone, len(sum), sum[:])
		c.DType = frame.DTypeU8
		if err := tr.Send(ctx, g.Members[m], c); err != nil {
			return ctx, nil, err
		}
	}
	commits := make([][sha256.Size]byte, R)
	for m := range R {
		if m == g.Self {
			continue
		}
		f, err := tr.Recv(ctx, g.Members[m], k.frameKey(frame.KindReduce, commitRound+base+m))
		if err != nil {
			return ctx, nil, fmt.Errorf("commitment from %s: %w", g.Members[m], err)
		}
		if f.DType != frame.DTypeU8 || len(f.Payload) != sha256.Size {
			bad[m] = fmt.Errorf("%w: a commitment of %d bytes (dtype %d), want a %d-byte digest", errMalformed, len(f.Payload), f.DType, sha256.Size)
			misbehaved(tr, g.Members[m], fmt.Sprintf("all-gather: %v", bad[m]))
			continue
		}
		commits[m] = [sha256.Size]byte(f.Payload)
	}
	return context.WithValue(ctx, committedKey{}, true), commits, nil
}

// checkCommitment says why member m's revealed payload p breaks its commitment (nil when
// it keeps it, or when the gather commits nothing).
func checkCommitment(commits [][sha256.Size]byte, m int, p []byte) error {
	if commits == nil {
		return nil
	}
	if sum := sha256.Sum256(p); sum != commits[m] {
		return fmt.Errorf("%w: a contribution that differs from its author's commitment (digest %x, committed %x before it saw the others')", errMalformed, sum[:4], commits[m][:4])
	}
	return nil
}

// sameBytes says whether a and b are the same slice (the same backing bytes and length),
// without reading them.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

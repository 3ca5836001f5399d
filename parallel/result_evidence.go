package parallel

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/mesh/frame"
)

// Result evidence. Every member of a signed gather signs the SHA-256 of the aggregate it
// computed (confirmSameResult), as a 32-byte contribution of round base+R+m against the
// same θ. Two colluders of four whose contributions the size rules rescale rather than
// drop, and that keep the aggregate their own judge computes (their own update unscaled),
// end the collective with other bits than the honest members; from then on they sign
// against another θ and every honest member drops them as undecodable, but nothing bound
// which θ was right, so they stayed in the plan (TestEvidenceTable). With the digests
// signed, the honest member's evidence of that gather holds every signed contribution
// and every signed result: the leader re-runs the workers' judge on the contributions
// (the length rules included), aggregates what it kept as the workers do
// (aggregateJudged) and convicts a member whose signed digest differs. An honest member's
// digest is the leader's to the bit (the judge and the aggregate are deterministic), so a
// reporter cannot convict one with it.

// resultDigestLen is the length of a signed result digest: SHA-256 and the signature's
// trailer.
const resultDigestLen = sha256.Size + sigTrailer

// checkResult is VerifyEvidence's check of the accused's signed result digest, once the
// judge (on all, the decoded contributions, which it left as the workers leave them)
// kept its contribution: the digest must verify as the accused's, against theta, for the
// gather's result round, and convicts when it differs from the aggregate of what the
// judge kept. Without a digest of the accused the judge's verdict stands: acquitted.
func (ev *Evidence) checkResult(all [][]float32, scoredOut bool, pol policy, theta [thetaLen]byte, accused string) (bool, string, error) {
	a := slices.Index(ev.Members, accused)
	if len(ev.Results) != len(ev.Members) || ev.Results[a] == nil {
		return false, "the leader's judge kept " + accused + "'s contribution", nil
	}
	R := len(ev.Members)
	if int(ev.Base)+2*R > math.MaxUint16 {
		return false, "", fmt.Errorf("%w: result rounds from %d for %d members", errEvidence, int(ev.Base)+R, R)
	}
	payload, claimed, sig, err := splitSigned(ev.Results[a])
	if err != nil || len(payload) != sha256.Size {
		return false, "", fmt.Errorf("%w: %s's result digest: %d bytes, %v", ErrForgedEvidence, accused, len(payload), err)
	}
	if claimed.theta() != theta {
		return false, "", fmt.Errorf("%w: %s's result digest was signed against another θ than the evidence ships", ErrForgedEvidence, accused)
	}
	s := slot{Job: ev.Job, Epoch: ev.Epoch, Step: ev.Step, Index: ev.Index, Round: ev.Base + uint16(R+a), Codec: frame.CodecNone, N: sha256.Size}
	if err := verifyContribution(accused, s, payload, claimed, sig); err != nil {
		return false, "", fmt.Errorf("%w: %v", ErrForgedEvidence, err)
	}
	x := make([]float32, ev.N)
	if err := aggregateJudged(x, all, scoredOut, pol, ev.Codec); err != nil {
		return false, "the leader's judge left no aggregate: " + err.Error(), nil
	}
	sum := sha256.Sum256(appendF32(nil, x))
	if bytes.Equal(payload, sum[:]) {
		return false, "the leader's judge kept " + accused + "'s contribution, and its signed result is the aggregate's", nil
	}
	return true, "signed a result other than the aggregate of the gather's signed contributions (result digest differs)", nil
}

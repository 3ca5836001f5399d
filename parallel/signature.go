package parallel

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"sync"
	"unsafe"

	"github.com/mr-tron/base58"

	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// Signed contributions (docs/security.md, "Verifiable offender evidence"). A worker whose
// transport holds its node key (SigningTransport) signs every contribution it sends in a
// checked gather (gatherAggregate) with that key, over a domain-separated digest of where
// the contribution belongs (job, epoch, step, run, round), of its encoded bytes and of
// the point θ it was computed against. Node IDs are libp2p peer IDs of Ed25519 keys, so
// every member recovers the author's public key from the ID alone. A contribution whose
// signature does not verify, or that claims another θ than the receiver's own, is
// dropped like a malformed one. What the signatures buy: a reporter can ship the
// contributions of a synchronisation to the leader (Evidence) and the leader can tell
// that the accused really sent what the evidence holds, against the θ the evidence
// holds, and re-score it (VerifyEvidence).

// SigningTransport is a Transport whose peer holds its node key: the workers on it sign
// their contributions in checked gathers and require their peers' signatures. The key is
// the node's libp2p Ed25519 identity as the standard library holds it (its 64 raw bytes);
// nil means the node has no such key and signs nothing. The engine opens no sockets and
// so imports no libp2p (internal/archtest): it signs with crypto/ed25519 and reads a
// peer ID's key itself (authorKey).
type SigningTransport interface {
	Transport
	SigningKey() ed25519.PrivateKey
}

// signatureDomain separates a contribution's signature from anything else the node key
// signs (libp2p's own handshakes, records). v2 signs the model digest beside θ's.
const signatureDomain = "meshnode contribution v2\x00"

// sigLen is an Ed25519 signature's length; thetaLen a θ digest's (SHA-256).
const (
	sigLen   = 64
	thetaLen = sha256.Size
	// sigTrailer is what a signed contribution carries after its encoded bytes: the
	// digests it is bound to (digests), then the signature.
	sigTrailer = 2*thetaLen + sigLen
)

// digests is what a contribution's signature binds beside its bytes: the digest of the
// θ it was computed against (the run's weights or anchors, which every receiver checks
// against its own), then the digest of the whole model it was scored from where that is
// more than θ (a pipelined replica's scorer loads the other stages' anchors,
// anchor_exchange.go, or their mirrored weights, stage_mirror.go), zero elsewhere. Receivers do not require the second to
// match (a member that does not score holds no other stage's anchors); a leader requires
// it of the evidence it re-scores (VerifyEvidence).
type digests [2 * thetaLen]byte

// theta is the digest of the θ the contribution was computed against.
func (d digests) theta() [thetaLen]byte { return [thetaLen]byte(d[:thetaLen]) }

// model is the digest of the whole model's anchors the contribution was scored from.
func (d digests) model() [thetaLen]byte { return [thetaLen]byte(d[thetaLen:]) }

// bind is the digests of θ and of the model's anchors.
func bind(theta, model [thetaLen]byte) digests {
	var d digests
	copy(d[:thetaLen], theta[:])
	copy(d[thetaLen:], model[:])
	return d
}

// slot is where a contribution belongs: the collective's key and the round that carries
// it (base + the author's position), so that a signed contribution cannot be replayed
// into another step, run or member's place.
type slot struct {
	Job   uint64
	Epoch uint32
	Step  uint32
	Index uint16
	Round uint16
	Codec frame.Codec
	N     uint32 // elements
}

// signedDigest is the digest a contribution's author signs: the domain, the slot, the
// SHA-256 of its encoded bytes and the digests it is bound to.
func signedDigest(s slot, payload []byte, theta digests) []byte {
	ph := sha256.Sum256(payload)
	b := append([]byte(signatureDomain), 0)
	b = binary.BigEndian.AppendUint64(b, s.Job)
	b = binary.BigEndian.AppendUint32(b, s.Epoch)
	b = binary.BigEndian.AppendUint32(b, s.Step)
	b = binary.BigEndian.AppendUint16(b, s.Index)
	b = binary.BigEndian.AppendUint16(b, s.Round)
	b = append(b, byte(s.Codec))
	b = binary.BigEndian.AppendUint32(b, s.N)
	b = append(b, ph[:]...)
	return append(b, theta[:]...)
}

// signContribution is payload followed by its trailer: theta and key's signature.
func signContribution(key ed25519.PrivateKey, s slot, payload []byte, theta digests) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign contribution: a %d-byte node key (an Ed25519 one has %d)", len(key), ed25519.PrivateKeySize)
	}
	sig := ed25519.Sign(key, signedDigest(s, payload, theta))
	if len(sig) != sigLen {
		return nil, fmt.Errorf("sign contribution: a %d-byte signature (an Ed25519 node key signs %d)", len(sig), sigLen)
	}
	out := make([]byte, 0, len(payload)+sigTrailer)
	return append(append(append(out, payload...), theta[:]...), sig...), nil
}

// errSignature is a contribution whose signature is missing or does not verify.
var errSignature = errors.New("contribution signature")

// splitSigned splits a signed contribution into its encoded bytes, digests and signature.
func splitSigned(p []byte) (payload []byte, theta digests, sig []byte, err error) {
	if len(p) < sigTrailer {
		return nil, theta, nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte trailer", errSignature, len(p), sigTrailer)
	}
	cut := len(p) - sigTrailer
	copy(theta[:], p[cut:cut+len(theta)])
	return p[:cut], theta, p[cut+len(theta):], nil
}

// ed25519IDPrefix is how the bytes of the peer ID of an Ed25519 key begin: the identity
// multihash (code 0x00) of 36 bytes, the key's protobuf encoding (field 1, the key type,
// 1 for Ed25519; field 2, 32 bytes of key), which libp2p writes deterministically.
var ed25519IDPrefix = []byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}

// authorKey is the public key of the node whose ID is member: a libp2p peer ID in its
// base58 text form ("12D3KooW…"), which embeds an Ed25519 key. Any other ID (an RSA or
// hashed key, another encoding) names no key an author could sign with here.
func authorKey(member string) (ed25519.PublicKey, error) {
	if len(member) > 64 {
		return nil, fmt.Errorf("%w: author ID of %d characters is not an Ed25519 peer ID", errSignature, len(member))
	}
	b, err := base58.Decode(member)
	if err != nil {
		return nil, fmt.Errorf("%w: author %q is not a peer ID: %v", errSignature, member, err)
	}
	if len(b) != len(ed25519IDPrefix)+ed25519.PublicKeySize || !bytes.HasPrefix(b, ed25519IDPrefix) {
		return nil, fmt.Errorf("%w: author %s is not the peer ID of an Ed25519 key", errSignature, member)
	}
	return ed25519.PublicKey(b[len(ed25519IDPrefix):]), nil
}

// verifyContribution checks that member signed payload for slot s against theta.
func verifyContribution(member string, s slot, payload []byte, theta digests, sig []byte) error {
	pub, err := authorKey(member)
	if err != nil {
		return err
	}
	if len(sig) != sigLen || !ed25519.Verify(pub, signedDigest(s, payload, theta), sig) {
		return fmt.Errorf("%w: %s's signature does not verify", errSignature, member)
	}
	return nil
}

// thetaDigest is the SHA-256 of vs' values as little-endian float32, in order: the θ a
// contribution is computed against (a run's DiLoCo anchor, or its weights at an
// every-step sync). Honest replicas hold the same θ bits (confirmSameResult checks it), so they
// compute the same digest.
func thetaDigest(vs ...[]float32) [thetaLen]byte {
	h := sha256.New()
	var buf [16 << 10]byte
	for _, v := range vs {
		hashF32(h, buf[:], v)
	}
	var out [thetaLen]byte
	h.Sum(out[:0])
	return out
}

// anchorDigest is the θ digest of a DiLoCo outer gather: the anchor's values (thetaDigest)
// and the step the anchor was taken at (the last outer step, or the restore), so that a
// signature binds which inner steps the contribution is the work of (from+1 to the
// gather's step; audits recompute exactly those, Evidence.From). Members that resumed
// from different steps sign different digests and drop each other's contributions as
// computed against another θ, instead of recomputing the wrong steps.
func anchorDigest(from int, vs ...[]float32) [thetaLen]byte {
	return anchorOf(from, thetaDigest(vs...))
}

// anchorOf is anchorDigest of the anchor whose thetaDigest is d.
func anchorOf(from int, d [thetaLen]byte) [thetaLen]byte {
	b := append([]byte(anchorDomain), d[:]...)
	return sha256.Sum256(binary.BigEndian.AppendUint32(b, uint32(from)))
}

// anchorDomain separates anchorDigest's input from thetaDigest's (a float32 stream).
const anchorDomain = "meshnode outer anchor v1\x00"

// littleEndian says whether this host stores float32 as the wire does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// hashF32 writes v's little-endian bytes into h: straight from v's memory on a
// little-endian host (SHA-256 speed), else through buf, a chunk at a time.
func hashF32(h hash.Hash, buf []byte, v []float32) {
	if littleEndian && len(v) > 0 {
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		return
	}
	per := len(buf) / 4
	for len(v) > 0 {
		n := min(per, len(v))
		for i, x := range v[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		h.Write(buf[:4*n])
		v = v[n:]
	}
}

// paramsDigest is thetaDigest of ps' values.
func paramsDigest(ps []*model.Param) [thetaLen]byte {
	vs := make([][]float32, len(ps))
	for i, p := range ps {
		vs[i] = p.Value.Data
	}
	return thetaDigest(vs...)
}

// signer signs this worker's contributions of one collective; nil when the worker has
// no node key (then nothing is signed and nothing is required).
type signer struct {
	key ed25519.PrivateKey
	// theta is the digest of the θ the collective's contributions are computed against;
	// computed once per collective, when first asked.
	theta func() [thetaLen]byte
	// model, when set, is the digest of the whole model the collective is scored from (a
	// pipelined replica's: DiLoCo's anchors, every-step sync's and ZeRO's mirrored
	// weights; bindModel); zero when nil.
	model func() [thetaLen]byte
	// thetas is the run's flat weights at that θ, as a list of one (every fragment's
	// under streaming; nil: no evidence is kept).
	thetas func() [][]float32
	// others, with model, is each stage's anchors or mirrored weights the scorer holds
	// (nil at the worker's own stage): what a leader loads to re-score (Evidence.Others).
	others func() [][]float32
	// keep, when set, receives the gather's signed contributions and its dropping
	// decision when it dropped someone (evidence.go).
	keep func(*Evidence)
	// from is DiLoCo's anchor step, which theta binds (anchorDigest): Evidence.From.
	from uint32
}

// lazyTheta is f computed once, on first call (safe for concurrent callers).
func lazyTheta(f func() [thetaLen]byte) func() [thetaLen]byte {
	return sync.OnceValue(f)
}

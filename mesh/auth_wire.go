package mesh

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The auth exchange on ProtocolAuth, initiator I and responder R:
//
//	I → R  hello     nonce_I (32 bytes)
//	R → I  challenge nonce_R (32 bytes)
//	I → R  proof     HMAC(secret, transcript("initiator"))
//	R → I  accept    HMAC(secret, transcript("responder"))
//	         or reject  (32 zero bytes) when the initiator's proof is wrong
//
// transcript(role) = "meshnode-auth-v1" ‖ role ‖ mesh ‖ id_I ‖ id_R ‖ nonce_I ‖ nonce_R,
// each field prefixed by its 16-bit length. The peer IDs are the ones the transport
// (Noise or TLS) authenticated, so a proof cannot be replayed to another peer, in the other
// role or in another mesh. The responder reveals a MAC only after verifying the
// initiator's; a reject tells the initiator that the two do not share the secret, so both
// sides refuse each other rather than only the one that noticed first. Every message is a kind byte, a length byte and a body whose length is fixed
// per kind and checked before it is read.
const (
	authHello     byte = 1
	authChallenge byte = 2
	authProof     byte = 3
	authAccept    byte = 4
	authReject    byte = 5

	authBodyLen = 32 // nonces and HMAC-SHA256 tags alike
)

// errAuthProtocol marks a violation of the auth protocol or a wrong proof: the peer is
// refused. Transport errors do not wrap it.
var errAuthProtocol = errors.New("auth protocol violation")

type authBody = [authBodyLen]byte

// writeAuthMsg writes one auth message.
func writeAuthMsg(w io.Writer, kind byte, body *authBody) error {
	var buf [2 + authBodyLen]byte
	buf[0], buf[1] = kind, authBodyLen
	copy(buf[2:], body[:])
	_, err := w.Write(buf[:])
	return err
}

// readAuthMsg reads one auth message of the wanted kind. It allocates nothing; a message
// of another kind or length fails with errAuthProtocol before its body is read.
func readAuthMsg(r io.Reader, want byte) (authBody, error) {
	_, body, err := readAuthMsgOf(r, want)
	return body, err
}

// readAuthMsgOf reads one auth message of any of the wanted kinds and returns its kind.
func readAuthMsgOf(r io.Reader, want ...byte) (byte, authBody, error) {
	var hdr [2]byte
	var body authBody
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, body, fmt.Errorf("read auth header: %w", err)
	}
	if !slices.Contains(want, hdr[0]) {
		return 0, body, fmt.Errorf("%w: message kind %d, want %v", errAuthProtocol, hdr[0], want)
	}
	if hdr[1] != authBodyLen {
		return 0, body, fmt.Errorf("%w: body length %d, want %d", errAuthProtocol, hdr[1], authBodyLen)
	}
	if _, err := io.ReadFull(r, body[:]); err != nil {
		return 0, body, fmt.Errorf("read auth body: %w", err)
	}
	return hdr[0], body, nil
}

// authMAC computes the proof for role over one exchange.
func authMAC(secret []byte, role, mesh string, initiator, responder peer.ID, nonceI, nonceR *authBody) authBody {
	mac := hmac.New(sha256.New, secret)
	for _, field := range [][]byte{[]byte("meshnode-auth-v1"), []byte(role), []byte(mesh),
		[]byte(initiator), []byte(responder), nonceI[:], nonceR[:]} {
		var n [2]byte
		binary.BigEndian.PutUint16(n[:], uint16(len(field)))
		mac.Write(n[:])
		mac.Write(field)
	}
	var out authBody
	copy(out[:], mac.Sum(nil))
	return out
}

// authParty is one side's view of an exchange: who it is, whom it talks to, what it knows.
type authParty struct {
	secret []byte
	mesh   string
	self   peer.ID
	remote peer.ID
	rand   io.Reader
}

// initiate runs the initiator's side over rw. It returns nil when the responder proved
// knowledge of the secret.
func (a authParty) initiate(rw io.ReadWriter) error {
	var nonceI authBody
	if _, err := io.ReadFull(a.rand, nonceI[:]); err != nil {
		return fmt.Errorf("auth nonce: %w", err)
	}
	if err := writeAuthMsg(rw, authHello, &nonceI); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	nonceR, err := readAuthMsg(rw, authChallenge)
	if err != nil {
		return err
	}
	proof := authMAC(a.secret, "initiator", a.mesh, a.self, a.remote, &nonceI, &nonceR)
	if err := writeAuthMsg(rw, authProof, &proof); err != nil {
		return fmt.Errorf("send proof: %w", err)
	}
	kind, got, err := readAuthMsgOf(rw, authAccept, authReject)
	if err != nil {
		return err
	}
	if kind == authReject {
		return fmt.Errorf("%w: the peer rejected our proof (its join secret or mesh name differs)", errAuthProtocol)
	}
	want := authMAC(a.secret, "responder", a.mesh, a.self, a.remote, &nonceI, &nonceR)
	if !hmac.Equal(got[:], want[:]) {
		return fmt.Errorf("%w: responder's proof does not match the join secret", errAuthProtocol)
	}
	return nil
}

// respond runs the responder's side over rw. It returns nil when the initiator proved
// knowledge of the secret, after sending its own proof.
func (a authParty) respond(rw io.ReadWriter) error {
	nonceI, err := readAuthMsg(rw, authHello)
	if err != nil {
		return err
	}
	var nonceR authBody
	if _, err := io.ReadFull(a.rand, nonceR[:]); err != nil {
		return fmt.Errorf("auth nonce: %w", err)
	}
	if err := writeAuthMsg(rw, authChallenge, &nonceR); err != nil {
		return fmt.Errorf("send challenge: %w", err)
	}
	got, err := readAuthMsg(rw, authProof)
	if err != nil {
		return err
	}
	want := authMAC(a.secret, "initiator", a.mesh, a.remote, a.self, &nonceI, &nonceR)
	if !hmac.Equal(got[:], want[:]) {
		var zero authBody
		_ = writeAuthMsg(rw, authReject, &zero)
		return fmt.Errorf("%w: initiator's proof does not match the join secret", errAuthProtocol)
	}
	accept := authMAC(a.secret, "responder", a.mesh, a.remote, a.self, &nonceI, &nonceR)
	if err := writeAuthMsg(rw, authAccept, &accept); err != nil {
		return fmt.Errorf("send accept: %w", err)
	}
	return nil
}

package dataplane

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/quic-go/quic-go"
)

// A node that is killed and restarts with its identity on the same port (kill -9, then
// the same data dir) leaves its peers holding QUIC connections to a process that is gone:
// without help they write frames into them until the idle timeout closes them, and the
// restarted node is not heard from for that long. QUIC's stateless reset (RFC 9000 §10.3)
// is the remedy: a packet for a connection the endpoint does not know is answered with a
// reset carrying the token the old process announced for that connection ID, and the peer
// closes the connection at once (its next Send dials the new process). The token is an
// HMAC of the connection ID under the transport's StatelessResetKey, so the key must
// survive the restart: it is derived from the node's identity key, as go-libp2p derives
// its own QUIC transport's (with another label: the two transports never share a key).

// resetKeyInfo labels the HKDF derivation of the data plane's stateless reset key.
const resetKeyInfo = "meshnode tensor data plane QUIC stateless reset key"

// statelessResetKey derives the QUIC stateless reset key from the node's identity: the
// same identity gives the same key in every process that holds it, and nobody without
// the private key can compute it (a forged reset would cut a node's connections).
func statelessResetKey(id crypto.PrivKey) (*quic.StatelessResetKey, error) {
	raw, err := id.Raw()
	if err != nil {
		return nil, fmt.Errorf("data plane: stateless reset key: identity key bytes: %w", err)
	}
	b, err := hkdf.Key(sha256.New, raw, nil, resetKeyInfo, len(quic.StatelessResetKey{}))
	if err != nil {
		return nil, fmt.Errorf("data plane: stateless reset key: %w", err)
	}
	var k quic.StatelessResetKey
	copy(k[:], b)
	return &k, nil
}

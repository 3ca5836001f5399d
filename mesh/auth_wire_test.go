package mesh

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func testPeerID(t testing.TB) peer.ID {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// exchange runs one auth exchange over a pipe and returns both sides' errors.
func exchange(ini, res authParty) (iniErr, resErr error) {
	c1, c2 := net.Pipe()
	done := make(chan error, 1)
	go func() {
		err := res.respond(c2)
		c2.Close()
		done <- err
	}()
	iniErr = ini.initiate(c1)
	c1.Close()
	return iniErr, <-done
}

func TestAuthExchange(t *testing.T) {
	i, r := testPeerID(t), testPeerID(t)
	party := func(secret, mesh string, self, remote peer.ID) authParty {
		return authParty{secret: []byte(secret), mesh: mesh, self: self, remote: remote, rand: rand.Reader}
	}
	tests := []struct {
		name         string
		ini, res     authParty
		iniOK, resOK bool
	}{
		{"same secret", party("s3cret-s3cret-s3cret", "m", i, r), party("s3cret-s3cret-s3cret", "m", r, i), true, true},
		{"wrong secret", party("other-other-other-o", "m", i, r), party("s3cret-s3cret-s3cret", "m", r, i), false, false},
		{"other mesh", party("s3cret-s3cret-s3cret", "m2", i, r), party("s3cret-s3cret-s3cret", "m", r, i), false, false},
		// A proof made for another peer pair does not verify.
		{"wrong peer ids", party("s3cret-s3cret-s3cret", "m", i, testPeerID(t)), party("s3cret-s3cret-s3cret", "m", r, i), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iniErr, resErr := exchange(tt.ini, tt.res)
			if (iniErr == nil) != tt.iniOK || (resErr == nil) != tt.resOK {
				t.Fatalf("initiator err %v, responder err %v; want ok %v/%v", iniErr, resErr, tt.iniOK, tt.resOK)
			}
			if !tt.resOK && !errors.Is(resErr, errAuthProtocol) {
				t.Errorf("responder error %v does not mark a protocol violation", resErr)
			}
			// A rejected initiator learns it was rejected: both sides refuse each other.
			if !tt.iniOK && !errors.Is(iniErr, errAuthProtocol) {
				t.Errorf("initiator error %v does not mark a protocol violation", iniErr)
			}
		})
	}
}

func TestReadAuthMsgRejectsBadFrames(t *testing.T) {
	var body authBody
	var good bytes.Buffer
	writeAuthMsg(&good, authHello, &body)
	for name, in := range map[string][]byte{
		"wrong kind":   append([]byte{authProof}, good.Bytes()[1:]...),
		"wrong length": append([]byte{authHello, 200}, good.Bytes()[2:]...),
	} {
		if _, err := readAuthMsg(bytes.NewReader(in), authHello); !errors.Is(err, errAuthProtocol) {
			t.Errorf("%s: err %v, want a protocol violation", name, err)
		}
	}
	if _, err := readAuthMsg(bytes.NewReader(good.Bytes()[:10]), authHello); err == nil || errors.Is(err, errAuthProtocol) {
		t.Errorf("truncated: err %v, want a read error", err)
	}
	if _, err := readAuthMsg(bytes.NewReader(good.Bytes()), authHello); err != nil {
		t.Errorf("good message: %v", err)
	}
}

// rwPair is a ReadWriter that reads from r and writes to w.
type rwPair struct {
	io.Reader
	io.Writer
}

// FuzzAuthResponder feeds arbitrary bytes to the responder, as a peer could: it must
// return an error (or, for a valid proof, nil) and never panic.
func FuzzAuthResponder(f *testing.F) {
	i, r := testPeerID(f), testPeerID(f)
	secret := []byte("fuzz-secret-0123456789")
	// Seed: a complete valid initiator transcript against a fixed responder nonce.
	var nonceI, nonceR authBody
	nonceI[0], nonceR[0] = 1, 2
	proof := authMAC(secret, "initiator", "m", i, r, &nonceI, &nonceR)
	var seed bytes.Buffer
	writeAuthMsg(&seed, authHello, &nonceI)
	writeAuthMsg(&seed, authProof, &proof)
	f.Add(seed.Bytes())
	f.Add(seed.Bytes()[:34])
	f.Add([]byte{authHello, 32})
	f.Fuzz(func(t *testing.T, data []byte) {
		res := authParty{secret: secret, mesh: "m", self: r, remote: i, rand: bytes.NewReader(nonceR[:])}
		_ = res.respond(rwPair{bytes.NewReader(data), io.Discard})
	})
}

// FuzzAuthInitiator feeds arbitrary responder replies to the initiator.
func FuzzAuthInitiator(f *testing.F) {
	i, r := testPeerID(f), testPeerID(f)
	secret := []byte("fuzz-secret-0123456789")
	var nonceI, nonceR authBody
	nonceI[0], nonceR[0] = 1, 2
	accept := authMAC(secret, "responder", "m", i, r, &nonceI, &nonceR)
	var seed bytes.Buffer
	writeAuthMsg(&seed, authChallenge, &nonceR)
	writeAuthMsg(&seed, authAccept, &accept)
	f.Add(seed.Bytes())
	var reject bytes.Buffer
	writeAuthMsg(&reject, authChallenge, &nonceR)
	writeAuthMsg(&reject, authReject, &authBody{})
	f.Add(reject.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		ini := authParty{secret: secret, mesh: "m", self: i, remote: r, rand: bytes.NewReader(nonceI[:])}
		err := ini.initiate(rwPair{bytes.NewReader(data), io.Discard})
		if err == nil && !bytes.Equal(data, seed.Bytes()) {
			t.Fatalf("initiator accepted %x", data)
		}
	})
}

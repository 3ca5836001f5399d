package consensus

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// pipeRW is the dialer's side of a handshake whose answer is already buffered.
type pipeRW struct {
	in  io.Reader
	out bytes.Buffer
}

func (p *pipeRW) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *pipeRW) Write(b []byte) (int, error) { return p.out.Write(b) }
func (p *pipeRW) SetDeadline(time.Time) error { return nil }

func TestClientHandshake(t *testing.T) {
	var ok, refused bytes.Buffer
	_ = writeJSONFrame(&ok, verdict{})
	_ = writeJSONFrame(&refused, verdict{Code: "foreign_cluster", Error: "peer of a foreign cluster: x"})
	rw := &pipeRW{in: &ok}
	if err := clientHandshake(rw, rw, "0123456789abcdef0123456789abcdef", time.Second); err != nil {
		t.Fatal(err)
	}
	var h hello
	if err := readJSONFrame(&rw.out, &h); err != nil || h.Cluster != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("hello sent: %+v %v", h, err)
	}
	rw = &pipeRW{in: &refused}
	if err := clientHandshake(rw, rw, "", time.Second); !errors.Is(err, ErrForeignCluster) {
		t.Fatalf("refusal: %v", err)
	}
}

// FuzzHandshakeFrames feeds arbitrary bytes to both readers of the raft handshake: the
// acceptor's hello and the dialer's verdict. Neither may panic or read past the bound.
func FuzzHandshakeFrames(f *testing.F) {
	for _, v := range []any{hello{Cluster: "0123456789abcdef0123456789abcdef"}, verdict{}, verdict{Code: "not_member", Error: "x"}} {
		var b bytes.Buffer
		_ = writeJSONFrame(&b, v)
		f.Add(b.Bytes())
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h hello
		_ = readJSONFrame(bytes.NewReader(data), &h)
		rw := &pipeRW{in: bytes.NewReader(data)}
		_ = clientHandshake(rw, rw, "", time.Second)
	})
}

package consensus

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// The raft stream handshake. The dialer writes a hello frame (the cluster it belongs to);
// the acceptor answers with a verdict frame: empty Error admits the stream, anything else
// refuses it and the stream is reset. Raft's own traffic follows on admitted streams only.

// maxHandshakeBytes bounds a hello or verdict frame.
const maxHandshakeBytes = 1 << 10

// hello opens every raft stream.
type hello struct {
	Cluster string `json:"cluster"`
}

// verdict answers a hello.
type verdict struct {
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

func writeJSONFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode handshake: %w", err)
	}
	return writeFrame(w, b, maxHandshakeBytes)
}

// readJSONFrame reads one bounded frame and decodes it strictly into v.
func readJSONFrame(r io.Reader, v any) error {
	b, err := readFrame(r, maxHandshakeBytes)
	if err != nil {
		return err
	}
	return strictUnmarshal(b, v)
}

// deadliner is the part of a stream the handshake needs to bound itself in time.
type deadliner interface {
	SetDeadline(time.Time) error
}

// clientHandshake sends this node's hello and waits for the acceptor's verdict.
func clientHandshake(s io.ReadWriter, d deadliner, cluster string, timeout time.Duration) error {
	_ = d.SetDeadline(time.Now().Add(timeout))
	defer d.SetDeadline(time.Time{})
	if err := writeJSONFrame(s, hello{Cluster: cluster}); err != nil {
		return err
	}
	var v verdict
	if err := readJSONFrame(s, &v); err != nil {
		return fmt.Errorf("read handshake verdict: %w", err)
	}
	if v.Code != "" || v.Error != "" {
		return errorFromWire(v.Code, "refused: "+v.Error)
	}
	return nil
}

package consensus

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Bounds of the RPC protocol, checked before anything is allocated.
const (
	// MaxRPCRequestBytes bounds one request frame.
	MaxRPCRequestBytes = MaxEntryBytes + 64<<10
	// MaxRPCResponseBytes bounds one response frame (a consistent list of all jobs).
	MaxRPCResponseBytes = 32 << 20
	// maxOpLen bounds an operation name.
	maxOpLen = 32
)

// rpcRequest is one request on ProtocolRPC: an operation name and its JSON arguments.
type rpcRequest struct {
	Op string `json:"op"`
	// Cluster is the caller's cluster ID, "" for a node that has not joined one yet.
	Cluster string          `json:"cluster,omitempty"`
	Body    json.RawMessage `json:"body,omitempty"`
}

// rpcResponse is the answer: either Body or an error with its code; Leader names the
// leader when the answering node is not it.
type rpcResponse struct {
	Code   string          `json:"code,omitempty"`
	Error  string          `json:"error,omitempty"`
	Leader string          `json:"leader,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// errFrame marks a frame that could not be read; the stream is reset.
var errFrame = errors.New("bad rpc frame")

// writeFrame writes a 4-byte big-endian length and the payload.
func writeFrame(w io.Writer, payload []byte, max int) error {
	if len(payload) > max {
		return fmt.Errorf("frame of %d bytes (max %d): %w", len(payload), max, ErrTooLarge)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(payload)))
	if _, err := w.Write(append(hdr[:], payload...)); err != nil {
		return fmt.Errorf("write rpc frame: %w", err)
	}
	return nil
}

// readFrame reads one frame, refusing a length over max before allocating.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %v", errFrame, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: length %d over %d: %w", errFrame, n, max, ErrTooLarge)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("%w: body: %v", errFrame, err)
	}
	return buf, nil
}

// decodeRequest parses a request frame's payload strictly: unknown fields, trailing data
// and unknown operations are errors.
func decodeRequest(b []byte) (rpcRequest, error) {
	var req rpcRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("%w: decode request: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return req, fmt.Errorf("%w: trailing data after request", ErrBadRequest)
	}
	if len(req.Op) > maxOpLen {
		return req, fmt.Errorf("%w: operation name of %d bytes", ErrBadRequest, len(req.Op))
	}
	if _, ok := ops[req.Op]; !ok {
		return req, fmt.Errorf("%w: unknown operation %q", ErrBadRequest, req.Op)
	}
	return req, nil
}

// strictUnmarshal decodes b into v refusing unknown fields and trailing data.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrBadRequest, v, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %T: trailing data", ErrBadRequest, v)
	}
	return nil
}

// encodeRequest is decodeRequest's inverse.
func encodeRequest(req rpcRequest) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode rpc request: %w", err)
	}
	return b, nil
}

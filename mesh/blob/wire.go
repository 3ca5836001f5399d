package blob

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// The blob protocol (ProtocolID) carries one request and one response per stream.
//
//	request   kind (1: manifest, 2: chunk, 3: pull) | blob ID, 32 bytes | chunk index, uint32 BE
//	response  status (0 ok, 1 not found, 2 bad request, 3 busy, 4 internal) | length,
//	          uint32 BE | payload: the manifest or the chunk when ok, else a short message
//
// The client closes its side after the request; the server closes after the response.
// A manifest or pull request carries index 0. A pull asks the server to fetch the blob
// from the client (replication pushed by the holder); it answers ok, with no payload, once
// the blob is complete and verified in its store. Lengths are checked against what the client
// expects (the chunk's length from the manifest, MaxManifestBytes for a manifest,
// maxBlobMessage for an error) before anything is allocated.
const (
	blobReqManifest byte = 1
	blobReqChunk    byte = 2
	blobReqPull     byte = 3

	blobRequestLen  = 1 + 32 + 4
	blobRespHeader  = 5
	maxBlobMessage  = 256
	blobStatusOK    = 0
	blobStatusNone  = 1
	blobStatusBad   = 2
	blobStatusBusy  = 3
	blobStatusError = 4
	maxBlobStatus   = blobStatusError
)

// errBlobProtocol marks a malformed blob request or response.
var errBlobProtocol = errors.New("blob protocol violation")

type blobRequest struct {
	kind  byte
	id    [32]byte
	index uint32
}

func (r blobRequest) idString() string { return hex.EncodeToString(r.id[:]) }

func appendBlobRequest(dst []byte, r blobRequest) []byte {
	dst = append(dst, r.kind)
	dst = append(dst, r.id[:]...)
	return binary.BigEndian.AppendUint32(dst, r.index)
}

// parseBlobRequest decodes exactly one request.
func parseBlobRequest(b []byte) (blobRequest, error) {
	var r blobRequest
	if len(b) != blobRequestLen {
		return r, fmt.Errorf("%w: request of %d bytes, want %d", errBlobProtocol, len(b), blobRequestLen)
	}
	r.kind = b[0]
	copy(r.id[:], b[1:33])
	r.index = binary.BigEndian.Uint32(b[33:])
	switch {
	case r.kind != blobReqManifest && r.kind != blobReqChunk && r.kind != blobReqPull:
		return r, fmt.Errorf("%w: request kind %d", errBlobProtocol, r.kind)
	case r.kind != blobReqChunk && r.index != 0:
		return r, fmt.Errorf("%w: request kind %d with index %d", errBlobProtocol, r.kind, r.index)
	case r.index >= MaxChunks:
		return r, fmt.Errorf("%w: chunk index %d ≥ %d", errBlobProtocol, r.index, MaxChunks)
	}
	return r, nil
}

func readBlobRequest(r io.Reader) (blobRequest, error) {
	var b [blobRequestLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return blobRequest{}, err
	}
	return parseBlobRequest(b[:])
}

func writeBlobResponse(w io.Writer, status byte, payload []byte) error {
	var h [blobRespHeader]byte
	h[0] = status
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// blobStatusErr is a non-ok response.
type blobStatusErr struct {
	status byte
	msg    string
}

func (e *blobStatusErr) Error() string {
	name := map[byte]string{blobStatusNone: "not found", blobStatusBad: "bad request", blobStatusBusy: "busy",
		blobStatusError: "internal error"}[e.status]
	return fmt.Sprintf("peer answered %s: %s", name, e.msg)
}

func (e *blobStatusErr) Is(target error) bool {
	return target == ErrNotFound && e.status == blobStatusNone || target == ErrRefused && e.status == blobStatusBad
}

// parseBlobResponseHeader checks a response header: a known status, and a length within
// maxLen for ok or maxBlobMessage otherwise.
func parseBlobResponseHeader(h [blobRespHeader]byte, maxLen int) (status byte, n int, err error) {
	status, u := h[0], binary.BigEndian.Uint32(h[1:])
	switch {
	case status > maxBlobStatus:
		return 0, 0, fmt.Errorf("%w: response status %d", errBlobProtocol, status)
	case status == blobStatusOK && uint64(u) > uint64(maxLen):
		return 0, 0, fmt.Errorf("%w: response of %d bytes, expected at most %d", errBlobProtocol, u, maxLen)
	case status != blobStatusOK && u > maxBlobMessage:
		return 0, 0, fmt.Errorf("%w: error message of %d bytes", errBlobProtocol, u)
	}
	return status, int(u), nil
}

// readBlobResponse reads one response; a non-ok status is returned as an error
// (matching ErrNotFound for "not found").
func readBlobResponse(r io.Reader, maxLen int) ([]byte, error) {
	var h [blobRespHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	status, n, err := parseBlobResponseHeader(h, maxLen)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("response payload: %w", err)
	}
	if status != blobStatusOK {
		return nil, &blobStatusErr{status: status, msg: string(b)}
	}
	return b, nil
}

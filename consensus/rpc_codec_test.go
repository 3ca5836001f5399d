package consensus

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

func validRequestFrames(t testing.TB) [][]byte {
	var frames [][]byte
	add := func(op string, args any) {
		body, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := encodeRequest(rpcRequest{Op: op, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := writeFrame(&b, payload, MaxRPCRequestBytes); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b.Bytes())
	}
	add("leader", struct{}{})
	add("submit", SubmitArgs{Spec: jobspec.DefaultSpec()})
	add("set_status", StatusArgs{ID: "abc", Status: JobCancelled})
	add("set_plan", PlanArgs{JobID: "abc", Plan: json.RawMessage(`{"x":1}`)})
	add("progress", ProgressRequest{JobID: "abc", Samples: []ProgressSample{{Step: 1, Loss: 2}}})
	add("get_job", JobArgs{ID: "abc"})
	add("join", JoinArgs{Node: Node{ID: "12D3KooW", Addrs: []string{"/ip4/1.2.3.4/tcp/1"}}})
	return frames
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range validRequestFrames(t) {
		payload, err := readFrame(bytes.NewReader(f), MaxRPCRequestBytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeRequest(payload); err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
	}
}

func TestReadFrameBounds(t *testing.T) {
	cases := map[string][]byte{
		"short header":    {0, 0},
		"over the bound":  {0, 0, 0x10, 0, 'x'}, // 4096 > 1024
		"truncated body":  {0, 0, 0, 5, 'a', 'b'},
		"max uint32 size": {0xff, 0xff, 0xff, 0xff},
	}
	for name, in := range cases {
		if _, err := readFrame(bytes.NewReader(in), 1024); !errors.Is(err, errFrame) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0x10, 0}), 1024); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized frame is not ErrTooLarge: %v", err)
	}
	var b bytes.Buffer
	if err := writeFrame(&b, make([]byte, 2048), 1024); !errors.Is(err, ErrTooLarge) {
		t.Errorf("writeFrame over the bound: %v", err)
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	for _, in := range []string{``, `{`, `[]`, `{"op":"nope"}`, `{"op":"leader","x":1}`, `{"op":"leader"} {}`,
		`{"op":"` + string(bytes.Repeat([]byte("a"), 100)) + `"}`} {
		if _, err := decodeRequest([]byte(in)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: got %v", in, err)
		}
	}
}

// FuzzRPCFrame feeds arbitrary bytes to the server's frame reader and request decoder,
// seeded with valid encodings: nothing may panic or allocate past the bound, and a request
// that decodes re-encodes to an equal request.
func FuzzRPCFrame(f *testing.F) {
	for _, fr := range validRequestFrames(f) {
		f.Add(fr)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 4096
		payload, err := readFrame(bytes.NewReader(data), max)
		if err != nil {
			return
		}
		if len(payload) > max {
			t.Fatalf("payload of %d bytes past the bound", len(payload))
		}
		req, err := decodeRequest(payload)
		if err != nil {
			return
		}
		again, err := encodeRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := decodeRequest(again)
		if err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
		if req.Op != req2.Op || !reflect.DeepEqual(compactJSON(req.Body), compactJSON(req2.Body)) {
			t.Fatalf("round trip changed the request: %+v → %+v", req, req2)
		}
	})
}

func compactJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return out.String()
}

package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

func TestConfigValidate(t *testing.T) {
	good := dpTestConfig(t, 1)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default with identity", func(*Config) {}, true},
		{"zero values", func(c *Config) { *c = Config{Identity: c.Identity} }, true},
		{"no identity", func(c *Config) { c.Identity = nil }, false},
		{"bad address", func(c *Config) { c.ListenAddr = "127.0.0.1" }, false},
		{"negative payload bound", func(c *Config) { c.MaxPayload = -1 }, false},
		{"keep-alive not below idle", func(c *Config) { c.KeepAlive, c.IdleTimeout = time.Minute, time.Minute }, false},
		{"negative streams", func(c *Config) { c.MaxIncomingStreams = -1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// Three nodes send frames of every kind to each other; receivers ask for the keys in the
// reverse of the sending order.
func TestDataPlaneExchange(t *testing.T) {
	ds := dpMesh(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kinds := []frame.Kind{frame.KindActivation, frame.KindGradient, frame.KindReduce, frame.KindScalar}
	const micros = 4
	payload := func(from, to int, k frame.Kind, m uint16) []byte {
		return fmt.Appendf(nil, "%d->%d kind %d micro %d", from, to, k, m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i, a := range ds {
		for j, b := range ds {
			if i == j {
				continue
			}
			wg.Go(func() {
				for _, k := range kinds {
					for m := range uint16(micros) {
						if err := a.Send(ctx, b.Self(), dpTestFrame(k, 5, m, payload(i, j, k, m))); err != nil {
							errs <- err
						}
					}
				}
			})
			wg.Go(func() {
				for _, k := range slices.Backward(kinds) {
					for m := uint16(micros); m > 0; m-- {
						key := frame.Key{Kind: k, Job: 7, Epoch: 1, Step: 5, Micro: m - 1, Index: 3}
						f, err := b.Recv(ctx, a.Self(), key)
						if err != nil {
							errs <- err
							return
						}
						if want := payload(i, j, k, m-1); !bytes.Equal(f.Payload, want) || f.Key() != key || !slices.Equal(f.Shape, []int{len(want)}) {
							errs <- fmt.Errorf("%d->%d %v: got %q shape %v, want %q", i, j, key, f.Payload, f.Shape, want)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := ds[0].Stats()
	for _, b := range ds[1:] {
		for _, k := range kinds {
			if got := st.Sent[b.Self()][k].Frames; got != micros {
				t.Errorf("stats: sent %d frames of kind %d to %s, want %d", got, k, b.Self(), micros)
			}
			if got := st.Received[b.Self()][k].Frames; got != micros {
				t.Errorf("stats: received %d frames of kind %d from %s, want %d", got, k, b.Self(), micros)
			}
		}
	}
	if st.TotalBadFrames() != 0 {
		t.Errorf("bad frames %v", st.BadFrames)
	}
}

// Both nodes dial each other at once, with several senders each: every frame arrives.
func TestDataPlaneSimultaneousDial(t *testing.T) {
	ds := dpMesh(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const senders, frames = 4, 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*senders*frames)
	for i, a := range ds {
		b := ds[1-i]
		for s := range senders {
			wg.Go(func() {
				<-start
				for n := range frames {
					f := dpTestFrame(frame.KindReduce, uint32(s), uint16(n), []byte{byte(i), byte(s), byte(n)})
					if err := a.Send(ctx, b.Self(), f); err != nil {
						errs <- err
					}
				}
			})
			wg.Go(func() {
				for n := range frames {
					f, err := b.Recv(ctx, a.Self(), frame.Key{Kind: frame.KindReduce, Job: 7, Epoch: 1, Step: uint32(s), Micro: uint16(n), Index: 3})
					if err != nil {
						errs <- err
						return
					}
					if want := []byte{byte(i), byte(s), byte(n)}; !bytes.Equal(f.Payload, want) {
						errs <- fmt.Errorf("got %v, want %v", f.Payload, want)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDataPlaneLargeFrames(t *testing.T) {
	ds := dpMesh(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const size = 16 << 20
	var wg sync.WaitGroup
	for i, a := range ds {
		b := ds[1-i]
		want := dpPayload(uint64(i), size)
		wg.Go(func() {
			if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 1, 0, want)); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			f, err := b.Recv(ctx, a.Self(), frame.Key{Kind: frame.KindActivation, Job: 7, Epoch: 1, Step: 1, Index: 3})
			if err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(f.Payload, want) {
				t.Errorf("16 MiB payload %d→%d differs", i, 1-i)
			}
		})
	}
	wg.Wait()
	if got := ds[0].Stats().SentBytes(frame.KindActivation); got != size {
		t.Errorf("sent bytes %d, want %d", got, size)
	}
}

func TestDataPlaneSendRefusesOversizedPayload(t *testing.T) {
	cfg := dpTestConfig(t, 1)
	cfg.MaxPayload = 1 << 10
	a := startDataPlane(t, cfg)
	err := a.Send(context.Background(), "nobody", dpTestFrame(frame.KindScalar, 0, 0, make([]byte, 2<<10)))
	if !errors.Is(err, frame.ErrTooBig) {
		t.Fatalf("Send of 2 KiB with a 1 KiB bound: %v, want frame.ErrTooBig", err)
	}
	if err := a.Send(context.Background(), "nobody", dpTestFrame(frame.KindScalar, 0, 0, nil)); !errors.Is(err, ErrNoPeerAddr) {
		t.Fatalf("Send to an unknown peer: %v, want ErrNoPeerAddr", err)
	}
}

// Each kind of malformed frame, sent by an authenticated peer on a raw stream, resets
// that stream with its code, is counted and attributed to that peer, allocates nothing
// beyond the bound, and leaves the data plane working.
func TestDataPlaneBadFramesResetStream(t *testing.T) {
	const bound = 1 << 20
	cfg := dpTestConfig(t, 1)
	cfg.MaxPayload = bound
	d := startDataPlane(t, cfg)
	good := startDataPlane(t, dpTestConfig(t, 2))
	good.SetPeerAddr(d.Self(), d.Addr())
	qc, rawID := dialRaw(t, d, 99)

	valid := func() []byte {
		b, err := frame.Append(nil, dpTestFrame(frame.KindGradient, 1, 0, []byte("payload")))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		mod  func([]byte) []byte
		code quic.StreamErrorCode
	}{
		{"oversized length", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[48:], 1<<32-1) // claims 4 GiB
			return b[:frame.HeaderSize]
		}, FrameResetTooBig},
		{"bad CRC", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, FrameResetCRC},
		{"unused dimension not zero", func(b []byte) []byte { b[40] = 1; return b }, FrameResetHeader},
		{"ndim too large", func(b []byte) []byte { b[28] = frame.MaxDims + 1; return b }, FrameResetHeader},
		{"unknown kind", func(b []byte) []byte { b[5] = 200; return b }, FrameResetKind},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, FrameResetMagic},
		{"bad version", func(b []byte) []byte { b[4] = 9; return b }, FrameResetVersion},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s := rawWrite(t, qc, tc.mod(valid()), false)
			select {
			case <-s.Context().Done():
			case <-time.After(10 * time.Second):
				t.Fatal("stream not reset within 10 s")
			}
			var se *quic.StreamError
			if err := context.Cause(s.Context()); !errors.As(err, &se) || !se.Remote || se.ErrorCode != tc.code {
				t.Fatalf("stream ended with %v, want a remote reset with code %#x", err, uint64(tc.code))
			}
			testutil.WaitFor(t, 10*time.Second, "bad-frame counter", func() bool { return d.Stats().BadFrames[rawID] == int64(i+1) })
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("allocated %d MiB while rejecting a frame (bound %d MiB)", grew>>20, bound>>20)
			}
			dpCheckStillWorks(t, d, good, qc, rawID, uint32(i))
		})
	}
	t.Run("truncated", func(t *testing.T) {
		b := valid()
		rawWrite(t, qc, b[:len(b)-3], true)
		testutil.WaitFor(t, 10*time.Second, "bad-frame counter", func() bool { return d.Stats().BadFrames[rawID] == int64(len(cases)+1) })
		dpCheckStillWorks(t, d, good, qc, rawID, 100)
	})
	if n := d.Stats().BadFrames[good.Self()]; n != 0 {
		t.Errorf("%d bad frames attributed to the well-behaved peer", n)
	}
}

// dpCheckStillWorks: after a bad frame, d still receives good frames from the offender
// (attributed to its verified ID) and from a Plane peer.
func dpCheckStillWorks(t *testing.T, d, good *Plane, raw *quic.Conn, rawID string, step uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := dpTestFrame(frame.KindScalar, step, 0, []byte("after"))
	b, err := frame.Append(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	rawWrite(t, raw, b, true)
	if got, err := d.Recv(ctx, rawID, f.Key()); err != nil || !bytes.Equal(got.Payload, f.Payload) {
		t.Fatalf("good frame from the offender after a bad one: %v", err)
	}
	if err := good.Send(ctx, d.Self(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Recv(ctx, good.Self(), f.Key()); err != nil {
		t.Fatalf("good frame from another peer after a bad one: %v", err)
	}
}

// A node answering at the address of another peer ID is refused by the dialler, and a
// peer that AllowPeer rejects is disconnected by the listener.
func TestDataPlaneRefusesWrongIdentity(t *testing.T) {
	ds := dpMesh(t, 3)
	a, b, c := ds[0], ds[1], ds[2]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a.SetPeerAddr(b.Self(), c.Addr()) // c impersonates b's address
	err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 1, 0, []byte("secret")))
	if err == nil {
		t.Fatal("Send to a node with another identity succeeded")
	}
	t.Logf("refused as expected: %v", err)
	if got := c.Stats().Received; len(got) != 0 {
		t.Errorf("impostor received %v", got)
	}

	cfg := dpTestConfig(t, 4)
	cfg.AllowPeer = func(id string) bool { return id == b.Self() }
	picky := startDataPlane(t, cfg)
	a.SetPeerAddr(picky.Self(), picky.Addr())
	// TLS 1.3 completes the client's handshake before the server checks the client's
	// certificate, so the first Sends may be accepted locally; the refusal closes the
	// connection and a later Send fails.
	var sendErr error
	testutil.WaitFor(t, 15*time.Second, "refusal by AllowPeer", func() bool {
		sendErr = a.Send(ctx, picky.Self(), dpTestFrame(frame.KindActivation, 2, 0, []byte("x")))
		return sendErr != nil
	})
	t.Logf("refused as expected: %v", sendErr)
	if got := picky.Stats().Received; len(got) != 0 {
		t.Errorf("refused peer's frames were received: %v", got)
	}
	b.SetPeerAddr(picky.Self(), picky.Addr())
	if err := b.Send(ctx, picky.Self(), dpTestFrame(frame.KindActivation, 3, 0, []byte("ok"))); err != nil {
		t.Fatal(err)
	}
	if _, err := picky.Recv(ctx, b.Self(), frame.Key{Kind: frame.KindActivation, Job: 7, Epoch: 1, Step: 3, Index: 3}); err != nil {
		t.Fatalf("allowed peer: %v", err)
	}
}

// A peer that leaves more than MailboxBytes unclaimed is disconnected; what it sent before
// stays receivable, and it can reconnect once the receiver caught up.
func TestDataPlaneMailboxOverflowDisconnects(t *testing.T) {
	cfg := dpTestConfig(t, 1)
	cfg.MailboxBytes = 1 << 20
	recv := startDataPlane(t, cfg)
	send := startDataPlane(t, dpTestConfig(t, 2))
	send.SetPeerAddr(recv.Self(), recv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chunk := dpPayload(1, 400<<10)
	for m := range uint16(3) { // the third exceeds 1 MiB
		if err := send.Send(ctx, recv.Self(), dpTestFrame(frame.KindReduce, 1, m, chunk)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "mailbox overflow", func() bool { return recv.Stats().MailboxOverflows[send.Self()] == 1 })
	for m := range uint16(2) {
		if _, err := recv.Recv(ctx, send.Self(), frame.Key{Kind: frame.KindReduce, Job: 7, Epoch: 1, Step: 1, Micro: m, Index: 3}); err != nil {
			t.Fatalf("frame %d sent before the overflow: %v", m, err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the sender to see the disconnection", func() bool { return !dpConnected(send, recv.Self()) })
	f := dpTestFrame(frame.KindReduce, 2, 0, []byte("again"))
	if err := send.Send(ctx, recv.Self(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := recv.Recv(ctx, send.Self(), f.Key()); err != nil {
		t.Fatal(err)
	}
}

// Close wakes a waiting Recv, refuses later calls and leaves no goroutine behind.
func TestDataPlaneCloseUnblocksRecv(t *testing.T) {
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := New(ctx, dpTestConfig(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, dpTestConfig(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	a.SetPeerAddr(b.Self(), b.Addr())
	b.SetPeerAddr(a.Self(), a.Addr())
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindScalar, 1, 0, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Recv(ctx, a.Self(), frame.Key{Kind: frame.KindScalar, Job: 7, Epoch: 1, Step: 1, Index: 3}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Recv(ctx, b.Self(), frame.Key{Kind: frame.KindScalar, Step: 99})
		done <- err
	}()
	if err := a.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Recv after Close: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not wake Recv")
	}
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindScalar, 2, 0, nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
}

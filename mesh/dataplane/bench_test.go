package dataplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	p2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// BenchmarkDataPlaneThroughput moves frames of 1–64 MiB one way over loopback through the
// Plane (header and CRC, one stream per kind, frame.Read into a fresh buffer, mailbox,
// Recv) and, in the same iterations, the same bytes as raw messages on one quic-go stream
// with the same TLS identities and QUIC settings, its receiver reusing one buffer (raw) or
// allocating a fresh one per message as the data plane must, since the receiver owns each
// frame (raw-alloc). Every iteration moves a 64 MiB batch through each, one after the
// other, so all see the same load on a shared machine. The standard MB/s is the data
// plane's (the raw parts are not timed); raw-MB/s, raw-alloc-MB/s and dataplane/raw are
// reported beside it. Documented in docs/PERFORMANCE.md:
//
//	go test ./mesh/dataplane -run '^$' -bench DataPlaneThroughput -benchtime 10x -count 3
func BenchmarkDataPlaneThroughput(b *testing.B) {
	for _, mib := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) { benchThroughput(b, mib<<20) })
	}
}

const benchBatchBytes = 64 << 20

func benchThroughput(b *testing.B, size int) {
	frames := max(1, benchBatchBytes/size)
	dp := newBenchDataPlanes(b, size)
	raw := newBenchRawQUIC(b, size)
	var rawTime, allocTime time.Duration
	b.SetBytes(int64(frames * size))
	b.ResetTimer()
	for range b.N {
		dp.move(b, frames)
		b.StopTimer()
		start := time.Now()
		raw.move(b, frames, false)
		rawTime += time.Since(start)
		start = time.Now()
		raw.move(b, frames, true)
		allocTime += time.Since(start)
		b.StartTimer()
	}
	b.StopTimer()
	bytes := float64(b.N * frames * size)
	rawMBs := bytes / rawTime.Seconds() / 1e6
	dpMBs := bytes / b.Elapsed().Seconds() / 1e6
	b.ReportMetric(rawMBs, "raw-MB/s")
	b.ReportMetric(bytes/allocTime.Seconds()/1e6, "raw-alloc-MB/s")
	b.ReportMetric(dpMBs/rawMBs, "dataplane/raw")
}

// benchDataPlanes is a connected sender and receiver and the next step number to use.
type benchDataPlanes struct {
	src, dst *Plane
	payload  []byte
	step     uint32
}

func newBenchDataPlanes(b *testing.B, size int) *benchDataPlanes {
	ds := dpMesh(b, 2)
	p := &benchDataPlanes{src: ds[0], dst: ds[1], payload: dpPayload(1, size)}
	p.move(b, 1) // connect before timing
	return p
}

// move sends n frames and returns when the receiver has all of them.
func (p *benchDataPlanes) move(b *testing.B, n int) {
	ctx := context.Background()
	first := p.step
	p.step += uint32(n)
	errc := make(chan error, 1)
	go func() {
		for i := range uint32(n) {
			if err := p.src.Send(ctx, p.dst.Self(), dpTestFrame(frame.KindActivation, first+i, 0, p.payload)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range uint32(n) {
		key := frame.Key{Kind: frame.KindActivation, Job: 7, Epoch: 1, Step: first + i, Index: 3}
		if _, err := p.dst.Recv(ctx, p.src.Self(), key); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// benchRawQUIC is one quic-go stream between two transports set up as the data plane's.
type benchRawQUIC struct {
	out     *quic.SendStream
	in      *quic.ReceiveStream
	payload []byte
	buf     []byte
}

func newBenchRawQUIC(b *testing.B, size int) *benchRawQUIC {
	cfg := dpTestConfig(b, 1)
	srvKey, cliKey := dpTestKey(b, 1), dpTestKey(b, 2)
	srvIdent, err := p2ptls.NewIdentity(srvKey)
	if err != nil {
		b.Fatal(err)
	}
	cliIdent, err := p2ptls.NewIdentity(cliKey)
	if err != nil {
		b.Fatal(err)
	}
	srvID, err := peer.IDFromPrivateKey(srvKey)
	if err != nil {
		b.Fatal(err)
	}
	srvTLS, _ := srvIdent.ConfigForPeer("")
	srvTLS.NextProtos = []string{ALPN}
	cliTLS, _ := cliIdent.ConfigForPeer(srvID)
	cliTLS.NextProtos = []string{ALPN}

	srvTr, cliTr := benchTransport(b), benchTransport(b)
	ln, err := srvTr.Listen(srvTLS, cfg.quicConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cli, err := cliTr.Dial(ctx, ln.Addr(), cliTLS, cfg.quicConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.CloseWithError(0, "") })
	srv, err := ln.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.CloseWithError(0, "") })
	r := &benchRawQUIC{payload: dpPayload(1, size), buf: make([]byte, size)}
	if r.out, err = cli.OpenUniStream(); err != nil {
		b.Fatal(err)
	}
	if _, err := r.out.Write(r.payload[:1]); err != nil { // make the stream known to the server
		b.Fatal(err)
	}
	if r.in, err = srv.AcceptUniStream(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(r.in, r.buf[:1]); err != nil {
		b.Fatal(err)
	}
	r.move(b, 1, false) // warm up as the data plane is
	return r
}

// move writes n messages of the payload's size and returns when all have been read, into
// one reused buffer or, with alloc, into a fresh buffer per message.
func (r *benchRawQUIC) move(b *testing.B, n int, alloc bool) {
	errc := make(chan error, 1)
	go func() {
		for range n {
			if _, err := r.out.Write(r.payload); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for range n {
		buf := r.buf
		if alloc {
			buf = make([]byte, len(r.buf))
		}
		if _, err := io.ReadFull(r.in, buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func benchTransport(b *testing.B) *quic.Transport {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	b.Cleanup(func() {
		tr.Close()
		udp.Close()
	})
	return tr
}

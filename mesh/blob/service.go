package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// ProtocolID is the stream protocol of the blob service: one request and one response per
// stream (wire.go). A change to the wire format gets a new ID.
const ProtocolID protocol.ID = "/meshnode/blob/1.0.0"

// Host is what the blob service needs from the mesh: Mesh satisfies it, serving and
// opening streams with admitted peers only.
type Host interface {
	Handle(pid protocol.ID, handler network.StreamHandler)
	NewStream(ctx context.Context, p peer.ID, pid protocol.ID) (network.Stream, error)
}

// Config configures a Service. Every field documents its zero value.
type Config struct {
	// Parallel is the number of chunks one Fetch requests at a time. Zero means 4.
	Parallel int
	// MaxBadChunks is how many bad chunks (wrong hash) or failed requests a source may
	// cost one Fetch before it is dropped as a source. Zero means 3.
	MaxBadChunks int
	// RequestTimeout bounds one request, served or made. Zero means 60 s.
	RequestTimeout time.Duration
	// MaxServing bounds the requests served at once; more are answered "busy". Zero
	// means 16.
	MaxServing int
	// Logger receives the service's logs. Nil discards them.
	Logger *slog.Logger
	// AcceptPull decides whether this node fetches a blob that a peer asks it to hold
	// (Replicate), and how large it may be (≤ 0: any size; a larger blob is refused once
	// its manifest arrives, before any chunk); a non-nil error refuses, and its message
	// goes back to the peer. Nil refuses every pull.
	AcceptPull func(from peer.ID, id string) (maxBytes int64, err error)
	// AllowServe decides whether this node serves blob id (its manifest and chunks) to
	// peer to; a non-nil error refuses, and its message goes back to the peer. A blob this
	// node asked to to hold (Replicate, while that request lasts) is always served to it.
	// Nil serves every held blob to every peer.
	AllowServe func(to peer.ID, id string) error

	// TamperChunk, when set, may replace each chunk this node serves (fault-injection
	// tests: it proves that corrupted chunks are detected and refetched). Nil in
	// production.
	TamperChunk func(id string, index int, chunk []byte) []byte
}

func (c Config) parallel() int { return orDefault(c.Parallel, 4) }
func (c Config) maxBad() int   { return orDefault(c.MaxBadChunks, 3) }
func (c Config) requestTimeout() time.Duration {
	return orDefault(c.RequestTimeout, 60*time.Second)
}
func (c Config) maxServing() int { return orDefault(c.MaxServing, 16) }

// Stats counts the blob service's work since it started.
type Stats struct {
	// ChunksServed and ChunksFetched count chunks sent to and verified from peers.
	ChunksServed, ChunksFetched int64
	// BadChunks counts fetched chunks whose hash did not match (each is refetched).
	BadChunks int64
	// DroppedSources counts sources a Fetch gave up on.
	DroppedSources int64
	// BlobsFetched and BytesFetched count whole blobs fetched, verified and stored.
	BlobsFetched, BytesFetched int64
	// RefusedServes counts requests for blobs Config.AllowServe did not let this node serve.
	RefusedServes int64
}

// Service serves the blobs of a Store on ProtocolID and fetches blobs from
// peers into it, verifying every chunk against the manifest and the manifest against the
// blob ID. Create it with NewService; it is safe for concurrent use.
type Service struct {
	host  Host
	store *Store
	cfg   Config
	log   *slog.Logger
	slots chan struct{} // MaxServing tokens

	served, fetched, bad, dropped atomic.Int64
	blobsFetched, bytesFetched    atomic.Int64

	mu       sync.Mutex
	inflight map[string]*fetchCall // one Fetch per blob at a time
	offers   map[offer]int         // Replicate requests in progress, by peer and blob
	refused  atomic.Int64          // requests AllowServe refused
}

// offer is a blob this node asked a peer to pull from it.
type offer struct {
	to peer.ID
	id string
}

type fetchCall struct {
	done chan struct{}
	err  error
}

// NewService serves store's blobs on h (registering ProtocolID) and fetches into it.
func NewService(h Host, store *Store, cfg Config) *Service {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b := &Service{host: h, store: store, cfg: cfg, log: log.With("component", "blob"),
		slots: make(chan struct{}, cfg.maxServing()), inflight: map[string]*fetchCall{}, offers: map[offer]int{}}
	h.Handle(ProtocolID, b.handle)
	return b
}

// Store is the service's store.
func (b *Service) Store() *Store { return b.store }

// Publish stores r's bytes as a blob that peers can fetch, and returns its ID.
func (b *Service) Publish(ctx context.Context, r io.Reader) (string, error) {
	return b.store.Publish(ctx, r)
}

// Has reports whether the blob is complete in the local store.
func (b *Service) Has(id string) bool { return b.store.Has(id) }

// Open opens a blob of the local store for reading.
func (b *Service) Open(id string) (*os.File, error) { return b.store.Open(id) }

// Stats returns the service's counters.
func (b *Service) Stats() Stats {
	return Stats{ChunksServed: b.served.Load(), ChunksFetched: b.fetched.Load(), BadChunks: b.bad.Load(),
		DroppedSources: b.dropped.Load(), BlobsFetched: b.blobsFetched.Load(), BytesFetched: b.bytesFetched.Load(),
		RefusedServes: b.refused.Load()}
}

// handle serves one request: a deadline on the stream, Reset on any error, Close after
// the response.
func (b *Service) handle(s network.Stream) {
	p := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(b.cfg.requestTimeout()))
	req, err := readBlobRequest(s)
	if err != nil {
		b.log.Info("bad blob request", "peer", p, "err", err)
		_ = s.Reset()
		return
	}
	var status byte
	var payload []byte
	if req.kind == blobReqPull {
		status, payload = b.pull(p, req.idString())
	} else if err := b.allowed(p, req.idString()); err != nil {
		b.refused.Add(1)
		b.log.Info("refused to serve a blob", "peer", p, "blob", req.idString(), "err", err)
		status, payload = blobStatusBad, []byte(truncate("not served: "+err.Error(), maxBlobMessage))
	} else {
		status, payload = b.serve(req)
	}
	if err := writeBlobResponse(s, status, payload); err != nil {
		b.log.Debug("blob response", "peer", p, "err", err)
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

// allowed reports whether blob id may be served to peer to: offered to it, or allowed by
// Config.AllowServe.
func (b *Service) allowed(to peer.ID, id string) error {
	b.mu.Lock()
	offered := b.offers[offer{to, id}] > 0
	b.mu.Unlock()
	if offered || b.cfg.AllowServe == nil {
		return nil
	}
	return b.cfg.AllowServe(to, id)
}

func (b *Service) serve(req blobRequest) (byte, []byte) {
	select {
	case b.slots <- struct{}{}:
		defer func() { <-b.slots }()
	default:
		return blobStatusBusy, []byte("too many requests in progress")
	}
	id := req.idString()
	var payload []byte
	var err error
	if req.kind == blobReqManifest {
		var m *Manifest
		if m, err = b.store.Manifest(id); err == nil {
			payload = m.Encode()
		}
	} else {
		payload, err = b.store.readChunk(id, int(req.index))
		if err == nil && b.cfg.TamperChunk != nil {
			payload = b.cfg.TamperChunk(id, int(req.index), payload)
		}
	}
	switch {
	case err == nil:
		if req.kind == blobReqChunk {
			b.served.Add(1)
		}
		return blobStatusOK, payload
	case errors.Is(err, ErrNotFound):
		return blobStatusNone, []byte(truncate(err.Error(), maxBlobMessage))
	default:
		b.log.Warn("serving blob", "blob", id, "index", req.index, "err", err)
		return blobStatusError, []byte(truncate(err.Error(), maxBlobMessage))
	}
}

// Replicate asks peer to hold blob id: the peer fetches it from this node (which must
// hold it), verifies it, and answers once it is complete in its store. It fails if the peer
// refuses (its AcceptPull) or cannot fetch the blob within RequestTimeout.
func (b *Service) Replicate(ctx context.Context, to peer.ID, id string) error {
	raw, err := parseBlobID(id)
	if err != nil {
		return err
	}
	if !b.store.Has(id) {
		return fmt.Errorf("replicate blob %s: %w", id, ErrNotFound)
	}
	o := offer{to, id}
	b.mu.Lock()
	b.offers[o]++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if b.offers[o]--; b.offers[o] == 0 {
			delete(b.offers, o)
		}
		b.mu.Unlock()
	}()
	_, err = b.request(ctx, to, blobRequest{kind: blobReqPull, id: raw}, 0)
	return err
}

// pull serves a Replicate request: fetch the blob from the asking peer, if policy allows.
func (b *Service) pull(from peer.ID, id string) (byte, []byte) {
	if b.cfg.AcceptPull == nil {
		return blobStatusBad, []byte("this node takes no replicas")
	}
	limit, err := b.cfg.AcceptPull(from, id)
	if err != nil {
		return blobStatusBad, []byte(truncate("replica refused: "+err.Error(), maxBlobMessage))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout())
	defer cancel()
	if err := b.fetchAtMost(ctx, id, []peer.ID{from}, limit); errors.Is(err, ErrTooLarge) {
		return blobStatusBad, []byte(truncate("replica refused: "+err.Error(), maxBlobMessage))
	} else if err != nil {
		return blobStatusError, []byte(truncate(err.Error(), maxBlobMessage))
	}
	return blobStatusOK, nil
}

// request makes one request to p and returns the ok payload (at most maxLen bytes).
func (b *Service) request(ctx context.Context, p peer.ID, req blobRequest, maxLen int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout())
	defer cancel()
	s, err := b.host.NewStream(ctx, p, ProtocolID)
	if err != nil {
		return nil, fmt.Errorf("open blob stream to %s: %w", p, err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	payload, err := b.exchange(s, req, maxLen)
	if err != nil {
		_ = s.Reset()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("blob request to %s: %w", p, err)
	}
	_ = s.Close()
	return payload, nil
}

func (b *Service) exchange(s network.Stream, req blobRequest, maxLen int) ([]byte, error) {
	if _, err := s.Write(appendBlobRequest(nil, req)); err != nil {
		return nil, err
	}
	if err := s.CloseWrite(); err != nil {
		return nil, err
	}
	return readBlobResponse(s, maxLen)
}

// orDefault returns v, or def when v is the zero value.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

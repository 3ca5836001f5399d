package blob

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// errFetchComplete ends a fetch's workers once every chunk is in.
var errFetchComplete = errors.New("fetch complete")

// busyBackoff is how long a fetch waits before asking a busy source again.
const busyBackoff = 50 * time.Millisecond

// Fetch makes blob id complete in the local store, unless it already is, by fetching it
// from the peers in from. The manifest comes from the first source that has it and is
// checked against the ID; chunks are fetched Parallel at a time, first from the first
// source still trusted, each checked against the manifest. A chunk that fails its check
// or its request is fetched again from the next source (the same one when it is the
// only one); a source that answers "not found", or fails more than MaxBadChunks times, is
// dropped. The whole blob is checked at the end and only then enters the store. Fetch
// fails with an error matching ErrNotFound when no source had it, or describing the
// last failure when every source was dropped. Concurrent Fetches of one blob share the work.
func (b *Service) Fetch(ctx context.Context, id string, from []peer.ID) error {
	return b.fetchAtMost(ctx, id, from, 0)
}

// FetchAtMost is Fetch of a blob of at most maxBytes (> 0), checked in its manifest
// before any chunk is asked for (ErrTooLarge): for a blob whose size a peer announced
// and the caller bounded, such as offender evidence.
func (b *Service) FetchAtMost(ctx context.Context, id string, from []peer.ID, maxBytes int64) error {
	if maxBytes <= 0 {
		return fmt.Errorf("fetch blob %s: bound %d: %w", id, maxBytes, ErrTooLarge)
	}
	return b.fetchAtMost(ctx, id, from, maxBytes)
}

// fetchAtMost is Fetch of a blob of at most maxBytes (≤ 0: any size), checked in its
// manifest before any chunk is asked for.
func (b *Service) fetchAtMost(ctx context.Context, id string, from []peer.ID, maxBytes int64) error {
	if _, err := parseBlobID(id); err != nil {
		return err
	}
	for {
		if b.store.Has(id) {
			return nil
		}
		b.mu.Lock()
		c := b.inflight[id]
		if c == nil {
			c = &fetchCall{done: make(chan struct{})}
			b.inflight[id] = c
			b.mu.Unlock()
			c.err = b.fetch(ctx, id, from, maxBytes)
			b.mu.Lock()
			delete(b.inflight, id)
			b.mu.Unlock()
			close(c.done)
			return c.err
		}
		b.mu.Unlock()
		select { // another Fetch is at it: wait, then look again
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fetchState is one Fetch in progress.
type fetchState struct {
	b  *Service
	id string
	m  *Manifest
	f  *os.File

	mu       sync.Mutex
	sources  []peer.ID // still trusted, in the caller's order
	fails    map[peer.ID]int
	attempts []int // per chunk
	left     int   // chunks not yet written
	lastErr  error
}

func (b *Service) fetch(ctx context.Context, id string, from []peer.ID, maxBytes int64) error {
	st := &fetchState{b: b, id: id, fails: map[peer.ID]int{}}
	for _, p := range from {
		if !slices.Contains(st.sources, p) {
			st.sources = append(st.sources, p)
		}
	}
	if len(st.sources) == 0 {
		return fmt.Errorf("fetch blob %s: %w: no sources given", id, ErrNotFound)
	}
	var err error
	if st.m, err = st.manifest(ctx); err != nil {
		return fmt.Errorf("fetch blob %s: %w", id, err)
	}
	if maxBytes > 0 && st.m.Size > maxBytes {
		return fmt.Errorf("fetch blob %s: %w: %d bytes, at most %d allowed", id, ErrTooLarge, st.m.Size, maxBytes)
	}
	if err := checkFreeSpace(b.store.dir, st.m.Size); err != nil {
		return fmt.Errorf("fetch blob %s: %w", id, err)
	}
	tmp, err := os.CreateTemp(b.store.dir, ".fetch-*")
	if err != nil {
		return fmt.Errorf("fetch blob %s: %w", id, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once committed
	st.f = tmp
	err = st.chunks(ctx) // chunks are written where they belong; the file grows as they come
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = verifyFile(tmp.Name(), st.m)
	}
	if err == nil {
		_, err = b.store.commit(tmp.Name(), st.m)
	}
	if err != nil {
		return fmt.Errorf("fetch blob %s: %w", id, err)
	}
	b.blobsFetched.Add(1)
	b.bytesFetched.Add(st.m.Size)
	b.log.Info("fetched blob", "blob", id, "bytes", st.m.Size, "chunks", len(st.m.Chunks))
	return nil
}

// manifest asks the sources in order for the manifest and checks it against the ID,
// going round again (after a pause) while any source is still trusted.
func (st *fetchState) manifest(ctx context.Context) (*Manifest, error) {
	want, _ := parseBlobID(st.id)
	for round := 1; ; round++ {
		for _, p := range st.trusted() {
			m, err := st.manifestFrom(ctx, p, want)
			if err == nil {
				return m, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			st.fail(p, err)
		}
		st.mu.Lock()
		left, last := len(st.sources), st.lastErr
		st.mu.Unlock()
		if left == 0 {
			return nil, fmt.Errorf("no source served the manifest: %w", last)
		}
		select {
		case <-time.After(time.Duration(round) * 100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (st *fetchState) manifestFrom(ctx context.Context, p peer.ID, want [32]byte) (*Manifest, error) {
	b, err := st.b.request(ctx, p, blobRequest{kind: blobReqManifest, id: want}, MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(b) != want {
		return nil, fmt.Errorf("manifest from %s: %w", p, ErrCorrupt)
	}
	return DecodeManifest(b)
}

func (st *fetchState) trusted() []peer.ID {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.sources)
}

// chunks fetches every chunk into st.f with Parallel workers.
func (st *fetchState) chunks(ctx context.Context) error {
	n := len(st.m.Chunks)
	if n == 0 {
		return nil
	}
	st.attempts, st.left = make([]int, n), n
	queue := make(chan int, n) // never more than n chunks are queued
	for i := range n {
		queue <- i
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range min(st.b.cfg.parallel(), n) {
		wg.Go(func() {
			for {
				select {
				case i := <-queue:
					if err := st.chunk(ctx, i); err != nil {
						cancel(err)
						return
					}
					if ctx.Err() == nil && !st.isDone(i) {
						queue <- i
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, errFetchComplete) {
		return err
	}
	return nil
}

// chunk makes one attempt at chunk i. It returns an error only when the whole fetch must
// stop: errFetchComplete after the last chunk, or the reason no source is left.
func (st *fetchState) chunk(ctx context.Context, i int) error {
	p, ok := st.pick(i)
	if !ok {
		st.mu.Lock()
		defer st.mu.Unlock()
		return fmt.Errorf("every source was dropped; last error: %w", st.lastErr)
	}
	want, _ := parseBlobID(st.id)
	size := st.m.ChunkLen(i)
	data, err := st.b.request(ctx, p, blobRequest{kind: blobReqChunk, id: want, index: uint32(i)}, size)
	switch {
	case ctx.Err() != nil:
		return nil
	case err == nil && (len(data) != size || sha256.Sum256(data) != st.m.Chunks[i]):
		st.b.bad.Add(1)
		st.b.log.Warn("bad chunk; fetching it again", "blob", st.id, "chunk", i, "peer", p)
		err = fmt.Errorf("chunk %d from %s: %w", i, p, ErrCorrupt)
	case err != nil && isBusy(err):
		st.unpick(i)
		select {
		case <-time.After(busyBackoff):
		case <-ctx.Done():
		}
		return nil
	}
	if err != nil {
		st.fail(p, err)
		return nil
	}
	if _, err := st.f.WriteAt(data, int64(i)*int64(st.m.ChunkSize)); err != nil {
		return err
	}
	st.b.fetched.Add(1)
	return st.markDone(i)
}

// pick chooses the source of the next attempt at chunk i: the first trusted source, then
// the next one at each further attempt.
func (st *fetchState) pick(i int) (peer.ID, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.sources) == 0 {
		return "", false
	}
	p := st.sources[st.attempts[i]%len(st.sources)]
	st.attempts[i]++
	return p, true
}

func (st *fetchState) unpick(i int) {
	st.mu.Lock()
	st.attempts[i]--
	st.mu.Unlock()
}

// fail records a failed request or a bad chunk from p, dropping p when it has no such
// blob or has failed more than MaxBadChunks times.
func (st *fetchState) fail(p peer.ID, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lastErr = err
	st.fails[p]++
	if !errors.Is(err, ErrNotFound) && st.fails[p] <= st.b.cfg.maxBad() {
		st.b.log.Info("blob source failed", "blob", st.id, "peer", p, "failures", st.fails[p], "err", err)
		return
	}
	if i := slices.Index(st.sources, p); i >= 0 {
		st.sources = slices.Delete(st.sources, i, i+1)
		st.b.dropped.Add(1)
		st.b.log.Warn("dropped blob source", "blob", st.id, "peer", p, "failures", st.fails[p], "err", err)
	}
}

func (st *fetchState) markDone(i int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.attempts[i] = -1 // done
	st.left--
	if st.left == 0 {
		return errFetchComplete
	}
	return nil
}

func (st *fetchState) isDone(i int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.attempts[i] < 0
}

func isBusy(err error) bool {
	var se *blobStatusErr
	return errors.As(err, &se) && se.status == blobStatusBusy
}

// IDOf returns the ID data would have if published with chunkSize (zero: the
// default), without storing anything.
func IDOf(data []byte, chunkSize int) string {
	if chunkSize == 0 {
		chunkSize = DefaultChunkSize
	}
	m := &Manifest{Size: int64(len(data)), ChunkSize: chunkSize, Sum: sha256.Sum256(data)}
	for off := 0; off < len(data); off += chunkSize {
		m.Chunks = append(m.Chunks, sha256.Sum256(data[off:min(off+chunkSize, len(data))]))
	}
	return m.ID()
}

// minFreeAfterFetch is the disk space a fetch must leave free: a node whose data dir fills
// up cannot write checkpoints or its raft log.
const minFreeAfterFetch = 256 << 20

// ErrNoSpace says a blob does not fit the data dir's free disk space.
var ErrNoSpace = errors.New("not enough free disk space")

// ErrTooLarge says a blob is larger than the fetch allows (a replica larger than any file
// of the job it was asked for).
var ErrTooLarge = errors.New("blob larger than allowed")

// ErrRefused is a peer's refusal of a request, e.g. of a Replicate its policy does not
// accept (yet: its control plane may not know the job that makes it acceptable).
var ErrRefused = errors.New("refused by the peer")

// checkFreeSpace refuses a fetch of size bytes into dir that would leave less than
// minFreeAfterFetch free, before anything is written.
func checkFreeSpace(dir string, size int64) error {
	free := freeBytes(dir)
	if free >= 0 && size > free-minFreeAfterFetch {
		return fmt.Errorf("%w in %s: the blob has %d MiB, %d MiB are free and %d MiB must stay free (free space there, or start the node with a --data-dir on a larger disk)",
			ErrNoSpace, dir, size>>20, free>>20, minFreeAfterFetch>>20)
	}
	return nil
}

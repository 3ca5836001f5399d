package offload

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/kernels"
)

// Binding places one tensor in a chunk: Data is bound to floats [Off, Off+N) of the chunk's
// buffer while the chunk is resident, and nil otherwise.
type Binding struct {
	Tensor *kernels.Tensor
	Off, N int
}

// Op is one step of the access schedule: the chunks it pins together, and those it
// writes (they become dirty, and are written back when evicted).
type Op struct {
	Chunks []int
	Writes []bool
	// Discard lists the chunks whose content is dead when the op ends (gradients after
	// their update): they are released without write-back and read as zeros afterwards.
	Discard []int
}

// Config is a store: its chunks, what lives in each, the access schedule, and where it goes.
type Config struct {
	// Dir is the directory of the backing file (created there, unlinked at once).
	Dir string
	// ChunkBytes is the size of every chunk, a multiple of Align.
	ChunkBytes int64
	// Buffers is the number of resident chunk buffers (budget ÷ ChunkBytes).
	Buffers int
	// Bindings lists, per chunk, the tensors it holds.
	Bindings [][]Binding
	// Ops is the access schedule of one training step, repeated step after step.
	Ops []Op
}

// chunk states besides being idle (absent or resident).
const (
	idle = iota
	loading
	writing
)

type chunk struct {
	buf   int // resident buffer, or -1
	state int
	pins  int
	want  int  // pin sets in progress that include it: never a victim
	dirty bool // the buffer differs from the backing copy
	zero  bool // the backing copy is all zeros (never written, or discarded)
	uses  []int
}

// Stats are a store's counters since it was opened.
type Stats struct {
	// ChunkBytes and Buffers: the chunk size and the resident buffers (the budget).
	ChunkBytes int64
	Buffers    int
	// Chunks is how many chunks the store holds (resident or not).
	Chunks int
	// ResidentPeakBytes is the most chunk memory that held chunks at once.
	ResidentPeakBytes int64
	// BytesRead and BytesWritten count the file I/O; ZeroLoads the chunks made resident
	// without a read (zero chunks).
	BytesRead, BytesWritten int64
	ZeroLoads               int64
	// Hits and Misses count the chunks a pin found resident or had to wait for.
	Hits, Misses int64
	// IOTime is the time spent in file reads and writes (by either thread); WaitTime the
	// time the computing thread spent waiting for chunks.
	IOTime, WaitTime time.Duration
	// Direct says whether the file bypasses the page cache (O_DIRECT).
	Direct bool
}

// Store keeps chunks of float32 tensors under a fixed number of resident buffers, the
// rest in a file. A prefetcher goroutine walks the schedule ahead of the computing thread
// and loads the chunks the next ops need, evicting the chunks used furthest in the future
// (Belady's rule: the schedule is known).
type Store struct {
	mu   sync.Mutex
	cond *sync.Cond

	file   *os.File
	direct bool
	region []byte      // the mapped buffers
	bufs   [][]float32 // Buffers views of ChunkBytes each
	free   []int

	chunkBytes int64
	chunks     []chunk
	bindings   [][]Binding
	ops        []Op

	cursor    int  // the op the computing thread is at (or will start next)
	scheduled bool // whether pins follow the schedule (a training step) or not
	resident  int  // buffers holding a chunk (or being filled or written)
	stats     Stats
	err       error
	closed    bool
	done      chan struct{}
}

// Open creates the store's file in cfg.Dir, maps its buffers and starts the prefetcher.
// Every chunk starts as zeros.
func Open(cfg Config) (*Store, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	f, direct, err := createFile(cfg.Dir)
	if err != nil {
		return nil, err
	}
	region, err := mapBuffers(int64(cfg.Buffers) * cfg.ChunkBytes)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Store{file: f, direct: direct, region: region, chunkBytes: cfg.ChunkBytes,
		chunks: make([]chunk, len(cfg.Bindings)), bindings: cfg.Bindings, ops: cfg.Ops, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	n := int(cfg.ChunkBytes / 4)
	for b := 0; b < cfg.Buffers; b++ {
		s.bufs = append(s.bufs, floats(region[int64(b)*cfg.ChunkBytes:], n))
		s.free = append(s.free, cfg.Buffers-1-b)
	}
	for c := range s.chunks {
		s.chunks[c] = chunk{buf: -1, zero: true}
	}
	for i, op := range cfg.Ops {
		for _, c := range op.Chunks {
			s.chunks[c].uses = append(s.chunks[c].uses, i)
		}
	}
	s.stats = Stats{ChunkBytes: cfg.ChunkBytes, Buffers: cfg.Buffers, Chunks: len(s.chunks), Direct: direct}
	go s.prefetch()
	return s, nil
}

func (cfg Config) check() error {
	if cfg.ChunkBytes <= 0 || cfg.ChunkBytes%Align != 0 {
		return fmt.Errorf("chunk size %d is not a positive multiple of %d", cfg.ChunkBytes, Align)
	}
	if cfg.Buffers < 1 {
		return errors.New("no resident chunk buffer: the budget is below one chunk")
	}
	for c, bs := range cfg.Bindings {
		for _, b := range bs {
			if b.Off < 0 || b.N < 0 || int64(b.Off+b.N)*4 > cfg.ChunkBytes || kernels.ShapeSize(b.Tensor.Shape) != b.N {
				return fmt.Errorf("chunk %d: binding [%d, %d) does not fit a chunk of %d bytes or its tensor", c, b.Off, b.Off+b.N, cfg.ChunkBytes)
			}
		}
	}
	for i, op := range cfg.Ops {
		if len(op.Chunks) > cfg.Buffers {
			return fmt.Errorf("op %d pins %d chunks, more than the %d resident buffers", i, len(op.Chunks), cfg.Buffers)
		}
		if len(op.Writes) != len(op.Chunks) {
			return fmt.Errorf("op %d: %d write flags for %d chunks", i, len(op.Writes), len(op.Chunks))
		}
		for _, c := range append(append([]int(nil), op.Chunks...), op.Discard...) {
			if c < 0 || c >= len(cfg.Bindings) {
				return fmt.Errorf("op %d names chunk %d of %d", i, c, len(cfg.Bindings))
			}
		}
	}
	return nil
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Err is the first I/O error the store met (every later pin returns it as an *IOError).
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// IOError is the error of a pin after the store's file failed: the state it held is lost.
type IOError struct{ Err error }

func (e *IOError) Error() string { return "offload store: " + e.Err.Error() }
func (e *IOError) Unwrap() error { return e.Err }

// BeginStep starts a scheduled training step at op 0; EndStep ends it. Between them pins
// must follow the schedule (Enter with the op the step is at).
func (s *Store) BeginStep() {
	s.mu.Lock()
	s.scheduled, s.cursor = true, 0
	s.cond.Broadcast()
	s.mu.Unlock()
}

// EndStep ends a scheduled step: the schedule starts again at op 0.
func (s *Store) EndStep() {
	s.mu.Lock()
	s.scheduled, s.cursor = false, 0
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Enter pins op i's chunks (waiting for them to be loaded) and binds their tensors; the
// schedule's cursor moves to i. Exit releases them. An error (*IOError) means the store's
// file failed and nothing is pinned.
func (s *Store) Enter(i int) error {
	op := s.ops[i]
	s.mu.Lock()
	if s.scheduled {
		s.cursor = i
		s.cond.Broadcast()
	}
	s.mu.Unlock()
	return s.Pin(op.Chunks, op.Writes)
}

// Exit releases op i's chunks, discarding those the op lists, and moves the cursor on.
func (s *Store) Exit(i int) {
	op := s.ops[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range op.Chunks {
		s.chunks[c].pins--
	}
	for _, c := range op.Discard {
		if ch := &s.chunks[c]; ch.pins == 0 && ch.buf >= 0 && ch.state == idle {
			s.unbind(c)
			s.free = append(s.free, ch.buf)
			s.resident--
			ch.buf, ch.dirty, ch.zero = -1, false, true
		}
	}
	if s.scheduled {
		s.cursor = i + 1
	}
	s.cond.Broadcast()
}

// Pin makes chunks resident and pins them (their tensors bound) until Unpin; writes
// marks those the caller will modify. It returns an *IOError, with nothing pinned, if the
// file failed.
func (s *Store) Pin(chunks []int, writes []bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range chunks {
		s.chunks[c].want++
	}
	defer func() {
		for _, c := range chunks {
			s.chunks[c].want--
		}
	}()
	for i, c := range chunks {
		if err := s.pinOne(c); err != nil {
			for _, p := range chunks[:i] {
				s.chunks[p].pins--
			}
			s.cond.Broadcast()
			return err
		}
		if writes != nil && writes[i] {
			s.chunks[c].dirty, s.chunks[c].zero = true, false
		}
	}
	return nil
}

// pinOne makes chunk c resident and pins it; s.mu is held.
func (s *Store) pinOne(c int) error {
	ch := &s.chunks[c]
	var start time.Time
	for {
		if s.err != nil {
			return &IOError{Err: s.err}
		}
		if ch.buf >= 0 && ch.state == idle {
			ch.pins++
			if start.IsZero() {
				s.stats.Hits++
			} else {
				s.stats.Misses++
				s.stats.WaitTime += time.Since(start)
			}
			return nil
		}
		if start.IsZero() {
			start = time.Now()
		}
		if ch.state != idle {
			s.cond.Wait()
			continue
		}
		b, ok := s.takeBuffer(-1)
		if !ok {
			s.cond.Wait()
			continue
		}
		if ch.buf >= 0 || ch.state != idle { // loaded meanwhile (takeBuffer may unlock)
			s.free = append(s.free, b)
			s.resident--
			continue
		}
		s.load(c, b)
	}
}

// Unpin releases chunks pinned by Pin.
func (s *Store) Unpin(chunks []int) {
	s.mu.Lock()
	for _, c := range chunks {
		s.chunks[c].pins--
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Zero sets chunks to zeros without I/O: resident ones are cleared, the others will load
// as zeros. None may be pinned.
func (s *Store) Zero(chunks []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range chunks {
		ch := &s.chunks[c]
		for ch.state != idle {
			s.cond.Wait()
		}
		if ch.pins > 0 {
			panic(fmt.Sprintf("offload: zeroing pinned chunk %d", c))
		}
		if ch.buf >= 0 {
			clear(s.bufs[ch.buf])
		}
		ch.dirty, ch.zero = false, true
	}
}

// nextUse is the index of the next op (at or after the cursor, the schedule unrolled
// once) that uses chunk c; never-used chunks come last.
func (s *Store) nextUse(c int) int {
	uses := s.chunks[c].uses
	if len(uses) == 0 {
		return 2 * len(s.ops)
	}
	if i := sort.SearchInts(uses, s.cursor); i < len(uses) {
		return uses[i]
	}
	return uses[0] + len(s.ops)
}

// takeBuffer returns a free buffer, evicting the resident chunk used furthest in the
// future if none is free; with limit ≥ 0 only a chunk used after limit may go. s.mu is
// held, and released while a dirty victim is written back.
func (s *Store) takeBuffer(limit int) (int, bool) {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		s.resident++
		s.stats.ResidentPeakBytes = max(s.stats.ResidentPeakBytes, int64(s.resident)*s.chunkBytes)
		return b, true
	}
	victim, far := -1, -1
	for c := range s.chunks {
		ch := &s.chunks[c]
		if ch.buf < 0 || ch.state != idle || ch.pins > 0 || ch.want > 0 {
			continue
		}
		if u := s.nextUse(c); u > far {
			victim, far = c, u
		}
	}
	if victim < 0 || (limit >= 0 && far <= limit) {
		return -1, false
	}
	ch := &s.chunks[victim]
	b := ch.buf
	s.unbind(victim)
	if ch.dirty {
		ch.state = writing
		s.mu.Unlock()
		start := time.Now()
		_, err := s.file.WriteAt(bytesOf(s.bufs[b]), int64(victim)*s.chunkBytes)
		s.mu.Lock()
		s.stats.IOTime += time.Since(start)
		s.stats.BytesWritten += s.chunkBytes
		ch.state = idle
		if err != nil && s.err == nil {
			s.err = fmt.Errorf("write chunk %d: %w", victim, err)
		}
		ch.dirty, ch.zero = false, false
	}
	ch.buf = -1
	s.cond.Broadcast()
	return b, true
}

// load fills buffer b with chunk c (a read, or zeros) and binds its tensors; s.mu is held
// and released during the read.
func (s *Store) load(c, b int) {
	ch := &s.chunks[c]
	ch.buf, ch.state = b, loading
	if ch.zero {
		clear(s.bufs[b])
		s.stats.ZeroLoads++
	} else {
		s.mu.Unlock()
		start := time.Now()
		_, err := s.file.ReadAt(bytesOf(s.bufs[b]), int64(c)*s.chunkBytes)
		s.mu.Lock()
		s.stats.IOTime += time.Since(start)
		s.stats.BytesRead += s.chunkBytes
		if err != nil && s.err == nil {
			s.err = fmt.Errorf("read chunk %d: %w", c, err)
		}
	}
	ch.state = idle
	s.bind(c)
	s.cond.Broadcast()
}

func (s *Store) bind(c int) {
	buf := s.bufs[s.chunks[c].buf]
	for _, b := range s.bindings[c] {
		b.Tensor.Data = buf[b.Off : b.Off+b.N : b.Off+b.N]
	}
}

func (s *Store) unbind(c int) {
	for _, b := range s.bindings[c] {
		b.Tensor.Data = nil
	}
}

// prefetch loads, ahead of the computing thread, the chunks of the next ops in schedule
// order, as long as a buffer is free or holds a chunk needed later than the one to load.
func (s *Store) prefetch() {
	defer close(s.done)
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.closed {
		c, use := s.candidate()
		if c < 0 || s.err != nil {
			s.cond.Wait()
			continue
		}
		b, ok := s.takeBuffer(use)
		if !ok {
			s.cond.Wait()
			continue
		}
		if ch := &s.chunks[c]; ch.buf >= 0 || ch.state != idle || s.closed {
			s.free = append(s.free, b)
			s.resident--
			continue
		}
		s.load(c, b)
	}
}

// candidate is the first chunk of the schedule, from the cursor on, that is not resident
// or on its way, and the index of its op (unrolled).
func (s *Store) candidate() (int, int) {
	for j := s.cursor; j < s.cursor+len(s.ops); j++ {
		for _, c := range s.ops[j%len(s.ops)].Chunks {
			if ch := &s.chunks[c]; ch.buf < 0 && ch.state == idle {
				return c, j
			}
		}
	}
	return -1, -1
}

// Close stops the prefetcher, unbinds every tensor, unmaps the buffers and closes the
// file (already unlinked: nothing remains on disk). Nothing may be pinned.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.chunks {
		s.unbind(c)
	}
	s.bufs = nil
	err := unmapBuffers(s.region)
	if cerr := s.file.Close(); err == nil {
		err = cerr
	}
	return err
}

package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// threadLimit caps the goroutines one kernel call may use; 0 means runtime.GOMAXPROCS(0).
var threadLimit atomic.Int32

// SetThreads caps the number of goroutines a single kernel call spreads its work over.
// n <= 0 restores the default, GOMAXPROCS. Several meshnode nodes sharing one machine set
// this so that they do not oversubscribe its cores. The setting never changes results.
func SetThreads(n int) {
	if n < 0 {
		n = 0
	}
	threadLimit.Store(int32(n))
}

// Threads reports how many goroutines a kernel call may use: the SetThreads limit, or
// GOMAXPROCS when none is set, never more than GOMAXPROCS.
func Threads() int {
	p := runtime.GOMAXPROCS(0)
	if n := int(threadLimit.Load()); n > 0 && n < p {
		return n
	}
	return p
}

// ParallelFor calls f over a partition of [0, n) into contiguous ranges, at most Threads()
// of them and none shorter than grain (except the last), and returns when all are done.
// With one range f runs on the calling goroutine.
func ParallelFor(n, grain int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := min(Threads(), (n+grain-1)/grain)
	defer slowdownEnd(slowdownStart(), max(parts, 1))
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	f(0, n/parts)
	wg.Wait()
}

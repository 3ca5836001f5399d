// Package offload keeps training state in fixed-size chunks under a memory budget: a
// fixed pool of resident chunk buffers (budget ÷ chunk size, mapped once outside the Go
// heap, so the resident state is bounded by construction) and a file holding the rest
// (PatrickStar's chunks, ZeRO-Infinity's offload to NVMe, on a CPU node).
//
// Tensors are bound into chunks (Binding): a tensor's Data points into its chunk's buffer
// while the chunk is resident and is nil otherwise. The access schedule of a training step
// is known in advance (Op: the chunks each pass pins together), so a prefetcher goroutine
// loads the next ops' chunks while the computing thread works, and eviction takes the
// resident chunk whose next use is furthest away (Belady's rule). Dirty chunks are written
// back when evicted, clean ones dropped; zero chunks (gradients after Zero, moments before
// the first update, anything discarded) load without a read.
//
// The file is created in the caller's directory and unlinked at once, so nothing stays on
// disk however the process ends; on Linux it is opened with O_DIRECT (aligned buffers,
// offsets and sizes) so that the page cache neither hides the I/O nor holds a second copy
// of the state, falling back to buffered I/O where the file system refuses direct I/O
// (tmpfs), which Stats.Direct reports.
//
// Choose picks the chunk size for a budget (Choose, Pack); parallel's Trainer binds a
// model's weights, gradients and AdamW moments with it (docs/memory.md, Knob 4).
package offload

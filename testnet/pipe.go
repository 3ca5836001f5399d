package testnet

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Bounds of one emulated link's queue. A packet that would wait longer than
// maxQueueDelay to be serialised, or that finds maxQueuedPackets ahead of it, is dropped
// (tail drop, as a router's buffer does), so memory stays bounded whatever the senders do.
const (
	maxQueueDelay    = 100 * time.Millisecond
	maxQueuedPackets = 8192
)

// packet is one datagram in flight on a pipe, due at `at`.
type packet struct {
	at      time.Time
	data    []byte
	deliver func([]byte)
}

// LinkCounters counts what happened to the packets offered to one emulated link.
type LinkCounters struct {
	// Delivered packets and their bytes.
	Packets, Bytes uint64
	// LossDrops were dropped by the emulated loss, QueueDrops by a full queue,
	// CutDrops by a partition.
	LossDrops, QueueDrops, CutDrops uint64
}

// pipe is one emulated directed link: packets leave one after another at the link's rate
// (serialisation delay), arrive Latency later, and are lost with probability Loss. One
// goroutine delivers them in order.
type pipe struct {
	params LinkParams

	mu       sync.Mutex
	rng      *rand.Rand
	q        []packet
	head     int
	nextFree time.Time // when the emulated serialiser is idle again
	stats    LinkCounters
	wake     chan struct{}
	done     chan struct{}
}

func newPipe(params LinkParams, seed uint64) *pipe {
	return &pipe{params: params, rng: rand.New(rand.NewPCG(seed, 0x6d657368)),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// enqueue offers data to the link; deliver is called with it when it arrives, unless it is
// dropped. It never blocks.
func (p *pipe) enqueue(data []byte, deliver func([]byte)) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.params.Loss > 0 && p.rng.Float64() < p.params.Loss {
		p.stats.LossDrops++
		return
	}
	start := now
	if p.nextFree.After(now) {
		start = p.nextFree
	}
	if len(p.q)-p.head >= maxQueuedPackets || start.Sub(now) > maxQueueDelay {
		p.stats.QueueDrops++
		return
	}
	if p.params.BytesPerSec > 0 {
		start = start.Add(time.Duration(float64(len(data)) / p.params.BytesPerSec * float64(time.Second)))
	}
	p.nextFree = start
	p.q = append(p.q, packet{at: start.Add(p.params.Latency), data: data, deliver: deliver})
	if len(p.q)-p.head == 1 {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// cut counts a packet dropped by a partition.
func (p *pipe) cut() {
	p.mu.Lock()
	p.stats.CutDrops++
	p.mu.Unlock()
}

// run delivers packets when they are due, until close.
func (p *pipe) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		pkt, wait, ok := p.next()
		switch {
		case ok:
			pkt.deliver(pkt.data)
			continue
		case wait > 0:
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-p.done:
				return
			}
		default:
			select {
			case <-p.wake:
			case <-p.done:
				return
			}
		}
	}
}

// next pops the head packet if it is due; otherwise it says how long until it is (0 when
// the queue is empty).
func (p *pipe) next() (packet, time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.q) {
		p.q, p.head = p.q[:0], 0
		return packet{}, 0, false
	}
	pkt := p.q[p.head]
	if wait := time.Until(pkt.at); wait > 0 {
		return packet{}, wait, false
	}
	p.q[p.head] = packet{}
	p.head++
	if p.head > 1024 && p.head*2 > len(p.q) {
		n := copy(p.q, p.q[p.head:])
		p.q, p.head = p.q[:n], 0
	}
	p.stats.Packets++
	p.stats.Bytes += uint64(len(pkt.data))
	return pkt, 0, true
}

func (p *pipe) snapshot() LinkCounters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *pipe) close() { close(p.done) }

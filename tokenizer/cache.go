package tokenizer

import (
	"bytes"
	"hash/maphash"
)

// wordCache maps a piece's bytes to its ids: a direct-mapped table (a piece's hash picks
// one slot; a new piece evicts the old one). A hit costs one hash and one comparison and
// allocates nothing; a miss reuses the slot's buffers, so a warm cache allocates nothing
// either, and its memory is bounded.
type wordCache struct {
	seed  maphash.Seed
	slots []cacheSlot
}

type cacheSlot struct {
	hash uint64
	key  []byte
	ids  []uint32
}

const (
	cacheSlots    = 1 << 15
	cacheMaxBytes = 256 // longer pieces are not cached
)

func newWordCache() wordCache {
	return wordCache{seed: maphash.MakeSeed(), slots: make([]cacheSlot, cacheSlots)}
}

func (c *wordCache) slot(w []byte) (*cacheSlot, uint64) {
	var h uint64
	if len(w) <= 8 { // most pieces: their bytes in one word, mixed, cheaper than maphash
		var k uint64
		for i, b := range w {
			k |= uint64(b) << (8 * i)
		}
		h = (k ^ uint64(len(w))<<59) * 0x9E3779B97F4A7C15
		h ^= h >> 29
	} else {
		h = maphash.Bytes(c.seed, w)
	}
	return &c.slots[h&(cacheSlots-1)], h
}

func (c *wordCache) get(w []byte) ([]uint32, bool) {
	s, h := c.slot(w)
	if s.hash != h || s.key == nil || !bytes.Equal(s.key, w) {
		return nil, false
	}
	return s.ids, true
}

func (c *wordCache) put(w []byte, ids []uint32) {
	if len(w) > cacheMaxBytes {
		return
	}
	s, h := c.slot(w)
	s.hash = h
	s.key = append(s.key[:0], w...)
	s.ids = append(s.ids[:0], ids...)
}

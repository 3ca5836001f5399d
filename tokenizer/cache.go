package tokenizer

// wordCache maps a piece's bytes to its ids. The ids live in one arena slice, so a hit
// allocates nothing; when the cache is full it is emptied (pieces repeat locally, and a
// bounded cache keeps an encoder's memory bounded).
type wordCache struct {
	index map[string]span
	arena []uint32
}

type span struct{ off, n uint32 }

const (
	cacheMaxWords = 1 << 16
	cacheMaxIDs   = 1 << 20
	cacheMaxBytes = 256 // longer pieces are not cached
)

func newWordCache() wordCache {
	return wordCache{index: make(map[string]span, 1024)}
}

func (c *wordCache) get(w []byte) ([]uint32, bool) {
	sp, ok := c.index[string(w)]
	if !ok {
		return nil, false
	}
	return c.arena[sp.off : sp.off+sp.n], true
}

func (c *wordCache) put(w []byte, ids []uint32) {
	if len(w) > cacheMaxBytes {
		return
	}
	if len(c.index) >= cacheMaxWords || len(c.arena)+len(ids) > cacheMaxIDs {
		clear(c.index)
		c.arena = c.arena[:0]
	}
	c.index[string(w)] = span{uint32(len(c.arena)), uint32(len(ids))}
	c.arena = append(c.arena, ids...)
}

package tokenizer

// pairTable maps a pair of ids (pairKey) to its merge: open addressing with linear probing
// over one slice of entries, at most half full, so a lookup is usually one cache line.
type pairTable struct {
	entries []pairEntry
	mask    uint64
	shift   uint
	n       int
}

type pairEntry struct {
	key uint64
	m   merge
}

// emptyPair marks a free entry. It is also pairKey(noID, noID), the pair of two bytes
// without a vocabulary id, which get must therefore refuse by hand; add never sees it,
// since merges are between vocabulary ids.
const emptyPair = ^uint64(0)

func newPairTable(n int) pairTable {
	size, bits := 16, uint(4)
	for size < 2*n {
		size, bits = size*2, bits+1
	}
	t := pairTable{entries: make([]pairEntry, size), mask: uint64(size - 1), shift: 64 - bits}
	for i := range t.entries {
		t.entries[i].key = emptyPair
	}
	return t
}

func (t *pairTable) index(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

func (t *pairTable) get(key uint64) (merge, bool) {
	if key == emptyPair { // (noID, noID): two bytes outside the vocabulary never merge
		return merge{}, false
	}
	for i := t.index(key); ; i = (i + 1) & t.mask {
		e := &t.entries[i]
		if e.key == key {
			return e.m, true
		}
		if e.key == emptyPair {
			return merge{}, false
		}
	}
}

// add inserts key unless present (the first, lowest-rank merge of a pair wins) and reports
// whether it did.
func (t *pairTable) add(key uint64, m merge) bool {
	for i := t.index(key); ; i = (i + 1) & t.mask {
		e := &t.entries[i]
		if e.key == key {
			return false
		}
		if e.key == emptyPair {
			e.key, e.m = key, m
			t.n++
			return true
		}
	}
}

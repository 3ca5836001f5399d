package tokenizer

// encoder is the scratch state of one Encode call: the pieces' symbols, the merge queue,
// the prefix-space buffer and a cache of pieces already encoded. Not safe for concurrent use;
// Tokenizer keeps them in a pool.
type encoder struct {
	t      *Tokenizer
	out    []uint32
	syms   []symbol
	queue  mergeQueue
	prefix []byte
	cache  wordCache
}

// symbol is one node of a piece's doubly linked list of tokens.
type symbol struct {
	id         uint32
	prev, next int32 // -1: none
	dead       bool
}

func newEncoder(t *Tokenizer) any {
	return &encoder{t: t, cache: newWordCache()}
}

// shrink drops buffers that one long piece or stretch grew past 1 MiB, so that a pooled
// encoder does not keep them.
func (e *encoder) shrink() {
	const limit = 1 << 20
	if cap(e.prefix) > limit {
		e.prefix = nil
	}
	if cap(e.syms)*12 > limit {
		e.syms = nil
	}
	if cap(e.queue.items)*12 > limit {
		e.queue.items = nil
	}
}

// encode splits text by added tokens (the non-normalized ones, then the normalized ones in
// the gaps) and pre-tokenizes and BPE-encodes the rest.
func (e *encoder) encode(text []byte) {
	e.splitAdded(0, text)
}

func (e *encoder) splitAdded(level int, s []byte) {
	if level == len(e.t.added) {
		e.segment(s)
		return
	}
	set := &e.t.added[level]
	if set.empty() {
		e.splitAdded(level+1, s)
		return
	}
	for len(s) > 0 {
		start, end, id := set.find(s, 0)
		if start < 0 {
			e.splitAdded(level+1, s)
			return
		}
		if start > 0 {
			e.splitAdded(level+1, s[:start])
		}
		e.out = append(e.out, id)
		s = s[end:]
	}
}

// segment pre-tokenizes one stretch of text between added tokens.
func (e *encoder) segment(s []byte) {
	if len(s) == 0 {
		return
	}
	if e.t.prefixSpace && s[0] != ' ' {
		e.prefix = append(append(e.prefix[:0], ' '), s...)
		s = e.prefix
	}
	e.pretokenize(0, s)
}

// pretokenize applies pre-tokenizer stage k to s and the later stages to its pieces.
func (e *encoder) pretokenize(k int, s []byte) {
	if k == len(e.t.stages) {
		e.word(s)
		return
	}
	split := e.t.stages[k]
	for i := 0; i < len(s); {
		j := split(s, i)
		e.pretokenize(k+1, s[i:j])
		i = j
	}
}

// word appends the ids of one pre-tokenized piece, from the cache when it was seen before.
// Pieces of one or two bytes are answered directly (at most one merge applies), which is
// cheaper than hashing them.
func (e *encoder) word(w []byte) {
	t := e.t
	switch {
	case len(w) == 1 && t.byteID[w[0]] != noID:
		e.out = append(e.out, t.byteID[w[0]])
		return
	case len(w) == 2 && !t.ignoreMerges:
		a, b := t.byteID[w[0]], t.byteID[w[1]]
		if a != noID && b != noID {
			if m, ok := t.merges.get(pairKey(a, b)); ok {
				e.out = append(e.out, m.id)
			} else {
				e.out = append(e.out, a, b)
			}
			return
		}
	}
	if ids, ok := e.cache.get(w); ok {
		e.out = append(e.out, ids...)
		return
	}
	n := len(e.out)
	if id, ok := t.wordID[string(w)]; ok && t.ignoreMerges {
		e.out = append(e.out, id)
	} else {
		e.bpe(w)
	}
	e.cache.put(w, e.out[n:])
}

// bpe merges the bytes of w, lowest rank first and leftmost first among equal ranks, over a
// linked list of symbols with a priority queue of candidate merges, as tokenizers'
// Word::merge_all does.
func (e *encoder) bpe(w []byte) {
	t := e.t
	syms := e.syms[:0]
	for i, b := range w {
		syms = append(syms, symbol{id: t.byteID[b], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	e.syms = syms
	q := &e.queue
	q.items = q.items[:0]
	for i := 0; i+1 < len(syms); i++ {
		e.push(int32(i), int32(i+1))
	}
	for len(q.items) > 0 {
		top := q.pop()
		s := &syms[top.pos]
		if s.dead || s.next < 0 {
			continue
		}
		r := &syms[s.next]
		m, ok := t.merges.get(pairKey(s.id, r.id))
		if !ok || m.rank != top.rank || m.id != top.id {
			continue // stale: one side has merged since
		}
		s.id = m.id
		r.dead = true
		s.next = r.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
			e.push(top.pos, s.next)
		}
		if s.prev >= 0 {
			e.push(s.prev, top.pos)
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		if id := syms[i].id; id != noID {
			e.out = append(e.out, id)
		} else {
			e.out = append(e.out, t.fallback[w[i]]...)
		}
	}
}

// push queues the merge of symbols a and b if there is one.
func (e *encoder) push(a, b int32) {
	if m, ok := e.t.merges.get(pairKey(e.syms[a].id, e.syms[b].id)); ok {
		e.queue.push(mergeItem{rank: m.rank, pos: a, id: m.id})
	}
}

// mergeItem is a candidate merge of the symbol at pos with its successor.
type mergeItem struct {
	rank uint32
	pos  int32
	id   uint32
}

// mergeQueue is a binary min-heap by (rank, pos), written out so that pushes do not box.
type mergeQueue struct{ items []mergeItem }

func (a mergeItem) less(b mergeItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

func (q *mergeQueue) push(it mergeItem) {
	q.items = append(q.items, it)
	h := q.items
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *mergeQueue) pop() mergeItem {
	h := q.items
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].less(h[m]) {
			m = l
		}
		if l+1 < n && h[l+1].less(h[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.items = h
	return top
}

package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// TrainConfig says what BPE to learn.
type TrainConfig struct {
	// VocabSize is the size of the vocabulary to learn, counting the 256 bytes and the
	// special tokens: VocabSize-256-len(Special) merges. Zero is invalid.
	VocabSize int
	// Special are added tokens with special: true, given the last ids in this order. Nil
	// means none.
	Special []string
	// Pattern is the pre-tokenizer: GPT2Pattern (the zero value means it; written as the
	// ByteLevel pre-tokenizer) or Llama3Pattern (written as Split then ByteLevel, with
	// ignore_merges as Llama-3 has it).
	Pattern string
	// MinFrequency stops training when the most frequent pair occurs fewer times. Zero
	// means 2: a pair seen once is not worth a token.
	MinFrequency int64
	// Progress, when not nil, is called every 256 merges and at the end.
	Progress func(merges, total int)
}

// DefaultTrainConfig is GPT-2's recipe at vocabulary 8192 with <|endoftext|>.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{VocabSize: 8192, Special: []string{"<|endoftext|>"}, Pattern: GPT2Pattern}
}

// Validate reports a configuration Train cannot use.
func (c TrainConfig) Validate() error {
	if c.Pattern != "" && c.Pattern != GPT2Pattern && c.Pattern != Llama3Pattern {
		return fmt.Errorf("pattern must be GPT-2's or Llama-3's (got %q)", c.Pattern)
	}
	if min := 256 + len(c.Special) + 1; c.VocabSize < min || c.VocabSize > MaxVocab {
		return fmt.Errorf("vocab must be between %d (256 bytes, %d special tokens and one merge) and %d (got %d)", min, len(c.Special), MaxVocab, c.VocabSize)
	}
	if c.MinFrequency < 0 {
		return fmt.Errorf("min-frequency must be ≥ 0 (got %d)", c.MinFrequency)
	}
	for i, s := range c.Special {
		if s == "" || slices.Contains(c.Special[:i], s) {
			return fmt.Errorf("special token %d (%q) is empty or repeated", i, s)
		}
	}
	return nil
}

// BPE is a learned byte-level BPE: ids 0..255 are the bytes (id b is byte b), then one token
// per merge in merge order, then the special tokens.
type BPE struct {
	Pattern string
	Tokens  [][]byte    // raw bytes of each non-special token, by id
	Merges  [][2]uint32 // in rank order; a merge makes the token of its two tokens' bytes
	Special []string    // ids len(Tokens)...
}

// Train learns a byte-level BPE from the documents: pieces are counted once (the
// pre-tokenizer's), then the most frequent adjacent pair is merged until the vocabulary is
// full, updating pair counts only in the pieces that hold the merged pair. Ties go to the
// smaller pair of ids. It returns fewer merges than asked when no pair occurs
// MinFrequency times.
func Train(ctx context.Context, cfg TrainConfig, docs [][]byte) (*BPE, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	loadClasses()
	if cfg.Pattern == "" {
		cfg.Pattern = GPT2Pattern
	}
	if cfg.MinFrequency == 0 {
		cfg.MinFrequency = 2
	}
	split := gpt2Split
	if cfg.Pattern == Llama3Pattern {
		split = llama3Split(3)
	}
	tr := newTrainer(countPieces(docs, split))
	out := &BPE{Pattern: cfg.Pattern, Special: slices.Clone(cfg.Special)}
	for b := range 256 {
		out.Tokens = append(out.Tokens, []byte{byte(b)})
	}
	ids := make(map[string]uint32, cfg.VocabSize)
	for b, tok := range out.Tokens {
		ids[string(tok)] = uint32(b)
	}
	total := cfg.VocabSize - 256 - len(cfg.Special)
	for len(out.Tokens) < 256+total {
		if len(out.Merges)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if cfg.Progress != nil {
				cfg.Progress(len(out.Tokens)-256, total)
			}
		}
		pair, count := tr.best()
		if count == 0 || count < cfg.MinFrequency {
			break
		}
		tok := append(slices.Clip(out.Tokens[pair[0]]), out.Tokens[pair[1]]...)
		id, seen := ids[string(tok)] // two merges may make one token ("ab c", "a bc")
		if !seen {
			id = uint32(len(out.Tokens))
			ids[string(tok)] = id
			out.Tokens = append(out.Tokens, tok)
		}
		out.Merges = append(out.Merges, pair)
		tr.merge(pair, id)
	}
	if cfg.Progress != nil {
		cfg.Progress(len(out.Tokens)-256, total)
	}
	if len(out.Merges) == 0 {
		return nil, errors.New("the corpus has no pair of bytes that repeats: nothing to learn")
	}
	return out, nil
}

// countPieces pre-tokenizes the documents and counts each distinct piece.
func countPieces(docs [][]byte, split splitter) map[string]int64 {
	counts := make(map[string]int64, 1<<16)
	for _, d := range docs {
		for i := 0; i < len(d); {
			j := split(d, i)
			counts[string(d[i:j])]++
			i = j
		}
	}
	return counts
}

// trainer holds the pieces as symbol sequences and the pair statistics.
type trainer struct {
	words [][]uint32
	freq  []int64
	count map[uint64]int64   // pair → occurrences, weighted by piece frequency
	where map[uint64][]int32 // pair → pieces that hold (or held) it
	heap  pairHeap
}

func newTrainer(pieces map[string]int64) *trainer {
	keys := make([]string, 0, len(pieces))
	for k := range pieces {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic piece order, so where-lists and ties are too
	tr := &trainer{count: make(map[uint64]int64), where: make(map[uint64][]int32)}
	for _, k := range keys {
		if len(k) < 2 {
			continue
		}
		w := make([]uint32, len(k))
		for i := range len(k) {
			w[i] = uint32(k[i])
		}
		wi := int32(len(tr.words))
		tr.words = append(tr.words, w)
		tr.freq = append(tr.freq, pieces[k])
		tr.addPairs(wi, noID)
	}
	for key, c := range tr.count {
		tr.heap.push(pairCount{key: key, count: c})
	}
	return tr
}

// addPairs counts the pairs of piece wi and lists wi under them; with only != noID, lists it
// only under the pairs that contain that token (the others list it already).
func (tr *trainer) addPairs(wi int32, only uint32) {
	w, f := tr.words[wi], tr.freq[wi]
	for i := 0; i+1 < len(w); i++ {
		key := pairKey(w[i], w[i+1])
		tr.count[key] += f
		if only == noID || w[i] == only || w[i+1] == only {
			l := tr.where[key]
			if len(l) == 0 || l[len(l)-1] != wi {
				tr.where[key] = append(l, wi)
			}
		}
	}
}

// best returns the most frequent pair (ties: the smaller ids), skipping stale heap entries.
func (tr *trainer) best() ([2]uint32, int64) {
	for tr.heap.len() > 0 {
		top := tr.heap.pop()
		c := tr.count[top.key]
		if c == top.count {
			return [2]uint32{uint32(top.key >> 32), uint32(top.key)}, c
		}
		if c > 0 { // counts of old pairs only fall: re-queue with the current one
			tr.heap.push(pairCount{key: top.key, count: c})
		}
	}
	return [2]uint32{}, 0
}

// merge replaces every occurrence of pair by id in the pieces that hold it and updates the
// pair counts of those pieces only.
func (tr *trainer) merge(pair [2]uint32, id uint32) {
	key := pairKey(pair[0], pair[1])
	fresh := map[uint64]bool{}
	for _, wi := range tr.where[key] {
		w, f := tr.words[wi], tr.freq[wi]
		if !holds(w, pair) {
			continue
		}
		for i := 0; i+1 < len(w); i++ {
			tr.count[pairKey(w[i], w[i+1])] -= f
		}
		out := w[:0]
		for i := 0; i < len(w); i++ {
			if i+1 < len(w) && w[i] == pair[0] && w[i+1] == pair[1] {
				out = append(out, id)
				i++
			} else {
				out = append(out, w[i])
			}
		}
		tr.words[wi] = out
		tr.addPairs(wi, id)
		for i := 0; i+1 < len(out); i++ {
			if out[i] == id || out[i+1] == id {
				fresh[pairKey(out[i], out[i+1])] = true
			}
		}
	}
	delete(tr.where, key)
	delete(tr.count, key)
	for k := range fresh {
		if c := tr.count[k]; c > 0 {
			tr.heap.push(pairCount{key: k, count: c})
		}
	}
}

func holds(w []uint32, pair [2]uint32) bool {
	for i := 0; i+1 < len(w); i++ {
		if w[i] == pair[0] && w[i+1] == pair[1] {
			return true
		}
	}
	return false
}

// pairCount is a heap entry: a pair and its count when queued.
type pairCount struct {
	key   uint64
	count int64
}

// pairHeap is a max-heap by count, then by smaller pair key.
type pairHeap struct{ items []pairCount }

func (a pairCount) before(b pairCount) bool {
	return a.count > b.count || (a.count == b.count && a.key < b.key)
}

func (h *pairHeap) len() int { return len(h.items) }

func (h *pairHeap) push(it pairCount) {
	h.items = append(h.items, it)
	s := h.items
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() pairCount {
	s := h.items
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].before(s[m]) {
			m = l
		}
		if l+1 < n && s[l+1].before(s[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	h.items = s
	return top
}

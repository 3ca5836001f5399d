package tokenizer

import (
	"bytes"
	"sort"
)

// addedSet finds added tokens in raw text: leftmost, then longest, as the Aho-Corasick
// automaton of tokenizers (MatchKind::LeftmostLongest) does.
type addedSet struct {
	first   [256]bool       // some token starts with this byte
	byFirst [256][]addedTok // tokens by first byte, longest first
	ids     map[string]uint32
}

type addedTok struct {
	content []byte
	id      uint32
}

func (a *addedSet) add(content []byte, id uint32) {
	if a.ids == nil {
		a.ids = make(map[string]uint32)
	}
	if _, dup := a.ids[string(content)]; dup {
		return
	}
	a.ids[string(content)] = id
	c := content[0]
	a.first[c] = true
	a.byFirst[c] = append(a.byFirst[c], addedTok{content, id})
	sort.SliceStable(a.byFirst[c], func(i, j int) bool { return len(a.byFirst[c][i].content) > len(a.byFirst[c][j].content) })
}

func (a *addedSet) empty() bool { return len(a.ids) == 0 }

// find returns the first match at or after from: its start, end and id (start < 0: none).
func (a *addedSet) find(s []byte, from int) (int, int, uint32) {
	for i := from; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		for _, tok := range a.byFirst[s[i]] {
			if bytes.HasPrefix(s[i:], tok.content) {
				return i, i + len(tok.content), tok.id
			}
		}
	}
	return -1, -1, 0
}

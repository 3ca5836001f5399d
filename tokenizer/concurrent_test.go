package tokenizer

import (
	"sync"
	"testing"
)

// A Tokenizer is shared: concurrent encodes (each with a pooled encoder) give the ids a
// lone one gives.
func TestConcurrentEncode(t *testing.T) {
	tok := loadTestTokenizer(t, goldenCases[0])
	text := readSample(t)[:50000]
	want := tok.Encode(text)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			part := text[g*1000 : g*1000+20000]
			for range 3 {
				if !equalIDs(tok.Encode(text), want) {
					errs <- "whole text"
				}
				tok.Encode(part)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

package tokenizer

import (
	"context"
	"testing"
)

func TestEndOfText(t *testing.T) {
	docs := randomCorpus(3, 500)
	for _, c := range []struct {
		special []string
		want    string
	}{
		{[]string{"<|pad|>", "<|endoftext|>"}, "<|endoftext|>"},
		{[]string{"</s>"}, "</s>"},
		{[]string{"<|pad|>"}, ""},
	} {
		bpe, err := Train(context.Background(), TrainConfig{VocabSize: 300, Special: c.special, Pattern: GPT2Pattern}, docs)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := bpe.Tokenizer()
		if err != nil {
			t.Fatal(err)
		}
		id, ok := tok.EndOfText()
		if c.want == "" {
			if ok {
				t.Errorf("%v: end of text %d, want none", c.special, id)
			}
			continue
		}
		if wantID, _ := tok.ID(c.want); !ok || id != wantID {
			t.Errorf("%v: end of text %d %v, want %s = %d", c.special, id, ok, c.want, wantID)
		}
	}
}

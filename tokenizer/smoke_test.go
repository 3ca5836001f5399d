package tokenizer

import (
	"bytes"
	"context"
	"testing"
)

func TestSmoke(t *testing.T) {
	docs := [][]byte{[]byte("hello world, hello there! It's the world's best hello.\n\n  indented   spaces 12345 ünïcödé 日本語 🙂")}
	cfg := DefaultTrainConfig()
	cfg.VocabSize = 300
	b, err := Train(context.Background(), cfg, docs)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := b.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(docs[0])
	back, _ := tok.Decode(ids)
	t.Log(len(docs[0]), len(ids), ids)
	if !bytes.Equal(back, docs[0]) {
		t.Fatalf("%q", back)
	}
}

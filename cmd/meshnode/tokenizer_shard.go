package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

type tokenizerShardOptions struct {
	tokenizer   string
	out         string
	textField   string
	shardTokens int
	output      string
}

func newTokenizerShardCmd() *cobra.Command {
	o := &tokenizerShardOptions{shardTokens: model.DefaultShardTokens}
	cmd := &cobra.Command{
		Use:   "shard --tokenizer FILE --out DIR SOURCE",
		Short: "Tokenize a text corpus once into content-addressed shards that train streams",
		Long: `Shard encodes SOURCE (a text file, a directory of text files, or a .jsonl file) with the
tokenizer, one document at a time, into DIR: shards of --shard-tokens uint16 ids, each named
by the SHA-256 of its bytes, and manifest.json listing them for the training and the
validation split (document k goes to validation when k mod 20 = 19). Memory stays at one
shard's buffer whatever the corpus's size; meshnode train --data DIR streams the shards.
The tokenizer is copied into DIR for generate.`,
		Example: `  meshnode tokenizer shard --tokenizer tokenizer.json --out shards docs/
  meshnode train --data shards --tokenizer shards/tokenizer.json --out ckpt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	f := cmd.Flags()
	f.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json to encode with (required)")
	f.StringVar(&o.out, "out", "", "directory to write the shards and manifest.json to (required)")
	f.StringVar(&o.textField, "text-field", model.DefaultTextField, "field of each .jsonl line that holds the text")
	f.IntVar(&o.shardTokens, "shard-tokens", o.shardTokens, "token ids per shard")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *tokenizerShardOptions) run(cmd *cobra.Command, source string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	switch {
	case o.tokenizer == "":
		return usagef("--tokenizer is required")
	case o.out == "":
		return usagef("--out is required")
	case o.shardTokens < 1:
		return usagef("--shard-tokens must be ≥ 1 (got %d)", o.shardTokens)
	}
	tok, err := tokenizer.Load(o.tokenizer)
	if err != nil {
		return usagef("--tokenizer: %v", err)
	}
	opt := model.TextOptions{Encoder: tok, EndOfText: -1, TextField: o.textField}
	if id, ok := tok.EndOfText(); ok {
		opt.EndOfText = int(id)
	}
	m, err := model.WriteShards(o.out, source, opt, o.shardTokens)
	if err != nil {
		return usagef("%v", err)
	}
	d := dataOptions{tokenizer: o.tokenizer}
	if err := d.saveTokenizer(o.out); err != nil {
		return err
	}
	count := func(refs []model.ShardRef) (n int) {
		for _, r := range refs {
			n += r.Tokens
		}
		return n
	}
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), map[string]any{"out": o.out, "vocab": m.Vocab, "train_shards": len(m.Train), "val_shards": len(m.Val),
			"train_tokens": count(m.Train), "val_tokens": count(m.Val)})
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d+%d shards, %d training and %d validation tokens (vocabulary %d)\n",
		filepath.Join(o.out, model.ShardManifestFile), len(m.Train), len(m.Val), count(m.Train), count(m.Val), m.Vocab)
	return nil
}

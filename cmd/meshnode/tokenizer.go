package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/tokenizer"
)

// newTokenizerCmd groups the byte-level BPE commands: train, encode, decode.
func newTokenizerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokenizer",
		Short: "Learn a byte-level BPE, encode and decode text with a tokenizer.json",
		Long: `Byte-level BPE tokenizers in Hugging Face's tokenizer.json format (GPT-2 and Llama-3 style):
train learns one from a corpus, encode prints the ids of a text, decode prints the text of
ids. The ids are those Hugging Face's tokenizers gives (docs/tokenizer.md).`,
	}
	cmd.AddCommand(newTokenizerTrainCmd(), newTokenizerEncodeCmd(), newTokenizerDecodeCmd(), newTokenizerShardCmd())
	return cmd
}

// loadTokenizer loads --tokenizer; a missing or malformed file is a usage error naming it.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if path == "" {
		return nil, usagef("--tokenizer is required (a tokenizer.json)")
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		var ce *tokenizer.ConfigError
		if errors.As(err, &ce) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, usagef("--tokenizer: %v", err)
		}
		return nil, err
	}
	return tok, nil
}

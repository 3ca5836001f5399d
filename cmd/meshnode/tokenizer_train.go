package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

type tokenizerTrainOptions struct {
	cfg      tokenizer.TrainConfig
	out      string
	pattern  string
	maxBytes int64
	output   string
}

func newTokenizerTrainCmd() *cobra.Command {
	o := &tokenizerTrainOptions{cfg: tokenizer.DefaultTrainConfig()}
	cmd := &cobra.Command{
		Use:   "train --vocab N [--out FILE] DATA...",
		Short: "Learn a byte-level BPE from a corpus and write its tokenizer.json",
		Long: `Learn a byte-level BPE of --vocab tokens (the 256 bytes, the merges, then --special tokens)
from DATA: builtin:gostd (the training split of the Go standard library's source, as
meshnode train uses it), text files, or directories of them. The pre-tokenizer is GPT-2's
(--pattern gpt2) or Llama-3's (--pattern llama3). The tokenizer.json it writes loads in
Hugging Face's tokenizers and in meshnode tokenizer encode.`,
		Example: `  meshnode tokenizer train --vocab 8192 --out tokenizer.json builtin:gostd`,
		Args:    cobra.ArbitraryArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	f := cmd.Flags()
	f.IntVar(&o.cfg.VocabSize, "vocab", o.cfg.VocabSize, "vocabulary size, counting the 256 bytes and the special tokens")
	f.StringVar(&o.out, "out", "tokenizer.json", "the tokenizer.json to write")
	f.StringVar(&o.pattern, "pattern", "gpt2", `pre-tokenizer: "gpt2" or "llama3"`)
	f.StringSliceVar(&o.cfg.Special, "special", o.cfg.Special, "special tokens, given the last ids")
	f.Int64Var(&o.cfg.MinFrequency, "min-frequency", 2, "stop when the most frequent pair occurs fewer times")
	f.Int64Var(&o.maxBytes, "max-bytes", 4<<30, "refuse a corpus larger than this many bytes")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func (o *tokenizerTrainOptions) run(cmd *cobra.Command, args []string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	switch o.pattern {
	case "gpt2":
		o.cfg.Pattern = tokenizer.GPT2Pattern
	case "llama3":
		o.cfg.Pattern = tokenizer.Llama3Pattern
	default:
		return usagef("--pattern: must be \"gpt2\" or \"llama3\" (got %q)", o.pattern)
	}
	if len(args) == 0 {
		return usagef("name the corpus: builtin:gostd, text files or directories")
	}
	if err := o.cfg.Validate(); err != nil {
		return usagef("--vocab/--special/--min-frequency: %v", err)
	}
	if o.out == "" {
		return usagef("--out must not be empty")
	}
	docs, size, err := readTrainCorpus(args, o.maxBytes)
	if err != nil {
		return err
	}
	o.cfg.Progress = trainProgress(cmd.ErrOrStderr(), o.output == "json")
	start := time.Now()
	bpe, err := tokenizer.Train(cmd.Context(), o.cfg, docs)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	secs := time.Since(start).Seconds()
	if err := bpe.WriteFile(o.out); err != nil {
		return err
	}
	vocab := len(bpe.Tokens) + len(bpe.Special)
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), map[string]any{"out": o.out, "vocab": vocab, "merges": len(bpe.Merges), "corpus_bytes": size, "seconds": round1(secs)})
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "learned %d tokens (%d merges) from %s in %.1f s; wrote %s\n", vocab, len(bpe.Merges), humanBytes(size), secs, o.out)
	return nil
}

// readTrainCorpus reads builtin:gostd (its training split) and text files or directories.
func readTrainCorpus(args []string, maxBytes int64) ([][]byte, int64, error) {
	var docs [][]byte
	var paths []string
	for _, a := range args {
		if a != model.BuiltinGoStd {
			paths = append(paths, a)
			continue
		}
		root, err := model.GoRoot()
		if err != nil {
			return nil, 0, usagef("%v", err)
		}
		train, _, err := model.GoStdCorpus(root)
		if err != nil {
			return nil, 0, usagef("%v", err)
		}
		docs = append(docs, train)
	}
	more, err := tokenizer.ReadCorpus(paths, maxBytes)
	if err != nil {
		return nil, 0, usagef("corpus: %v", err)
	}
	docs = append(docs, more...)
	var size int64
	for _, d := range docs {
		size += int64(len(d))
	}
	if size == 0 {
		return nil, 0, usagef("corpus: %v is empty", args)
	}
	return docs, size, nil
}

// trainProgress prints the merge count on a terminal, nothing otherwise.
func trainProgress(w io.Writer, quiet bool) func(int, int) {
	f, ok := w.(*os.File)
	if quiet || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return func(done, total int) {
		fmt.Fprintf(w, "\rmerges %d/%d", done, total)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

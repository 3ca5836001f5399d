package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/tokenizer"
)

// TokenizerFile is the name of the tokenizer a run trained with, in its --out directory,
// where generate finds it.
const TokenizerFile = "tokenizer.json"

// dataOptions are train's flags about how --data becomes tokens.
type dataOptions struct {
	tokenizer string
	textField string
	tok       *tokenizer.Tokenizer
}

func (d *dataOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.tokenizer, "tokenizer", "", "tokenizer.json to encode text sources with (byte-level BPE); --vocab defaults to its vocabulary, and --out keeps a copy for generate")
	f.StringVar(&d.textField, "text-field", model.DefaultTextField, "field of each .jsonl line that holds the text")
}

// loadTokenizer reads --tokenizer (or, on --resume without it, the tokenizer the run was
// started with) and sets or checks the model's vocabulary against it.
func (d *dataOptions) loadTokenizer(cmd *cobra.Command, o *trainOptions) error {
	path := d.tokenizer
	if path == "" && o.resume != "" {
		if p := findTokenizer(o.resume); p != "" {
			path = p
		}
	}
	if path == "" {
		return nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return usagef("--tokenizer: %v", err)
	}
	n := tok.VocabSize()
	switch {
	case o.resume != "" && o.cfg.Model.Vocab != n:
		return usagef("--tokenizer: %s has a vocabulary of %d; the checkpoint's model.vocab is %d", path, n, o.cfg.Model.Vocab)
	case cmd.Flags().Changed("vocab") && o.cfg.Model.Vocab != n:
		return usagef("--vocab %d does not match --tokenizer %s, whose vocabulary is %d (leave --vocab out to use it)", o.cfg.Model.Vocab, path, n)
	}
	o.cfg.Model.Vocab = n
	d.tok, d.tokenizer = tok, path
	return nil
}

// load reads --data, through the tokenizer when there is one.
func (d *dataOptions) load(o *trainOptions) (*model.Dataset, error) {
	opt := model.TextOptions{TextField: d.textField, EndOfText: -1}
	if d.tok != nil {
		opt.Encoder = d.tok
		if id, ok := d.tok.EndOfText(); ok {
			opt.EndOfText = int(id)
		}
	}
	return model.LoadDatasetWith(o.cfg.Data, o.cfg.Model.Vocab, opt)
}

// saveTokenizer copies the tokenizer into the --out directory.
func (d *dataOptions) saveTokenizer(out string) error {
	if d.tokenizer == "" || out == "" {
		return nil
	}
	b, err := os.ReadFile(d.tokenizer)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	dst := filepath.Join(out, TokenizerFile)
	if abs, _ := filepath.Abs(d.tokenizer); abs == mustAbs(dst) {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}

// findTokenizer looks for the tokenizer of a checkpoint: in the step directory, in the
// --out directory above it, or beside a model.safetensors file. Empty when none is there.
func findTokenizer(path string) string {
	dir := path
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir = filepath.Dir(path)
	} else if ck, err := parallel.LoadCheckpoint(path); err == nil {
		dir = ck.Dir
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		p := filepath.Join(d, TokenizerFile)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

type generateOptions struct {
	checkpoint string
	prompt     string
	heads      int
	sample     model.SampleOptions
	output     string
}

func newGenerateCmd() *cobra.Command {
	o := &generateOptions{sample: model.SampleOptions{Tokens: 200, Temperature: 0.8, TopK: 40, Seed: 1}}
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Sample text from a checkpoint",
		Long: `Sample byte-level text from a GPT checkpoint: a model.safetensors file with GPT-2 names,
or a checkpoint directory written by meshnode train --out (the latest step is used).`,
		Example: `  meshnode generate --checkpoint ckpt --prompt "func main() {" --tokens 200`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.checkpoint, "checkpoint", "", "model.safetensors, or a checkpoint directory (required)")
	f.StringVar(&o.prompt, "prompt", "\n", "text to continue")
	f.IntVar(&o.sample.Tokens, "tokens", o.sample.Tokens, "tokens (bytes) to generate")
	f.Float64Var(&o.sample.Temperature, "temperature", o.sample.Temperature, "sampling temperature; 0 is greedy")
	f.IntVar(&o.sample.TopK, "top-k", o.sample.TopK, "sample among the K most likely tokens; 0: all")
	f.Uint64Var(&o.sample.Seed, "seed", o.sample.Seed, "sampling seed")
	f.IntVar(&o.heads, "heads", 0, "attention heads, for files whose metadata lacks n_head")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *generateOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	switch {
	case o.checkpoint == "":
		return usagef("--checkpoint is required")
	case o.sample.Tokens < 0:
		return usagef("--tokens must be ≥ 0 (got %d)", o.sample.Tokens)
	case o.sample.Temperature < 0:
		return usagef("--temperature must be ≥ 0 (got %g)", o.sample.Temperature)
	case o.sample.TopK < 0:
		return usagef("--top-k must be ≥ 0 (got %d)", o.sample.TopK)
	case o.prompt == "":
		return usagef("--prompt must not be empty")
	}
	g, err := loadModelFile(o.checkpoint, o.heads)
	if err != nil {
		return usagef("--checkpoint: %v", err)
	}
	prompt := make([]int32, len(o.prompt))
	for i := range len(o.prompt) {
		prompt[i] = int32(o.prompt[i])
	}
	toks, err := model.Generate(g, prompt, o.sample)
	if err != nil {
		return usagef("--prompt: %v", err)
	}
	text := make([]byte, len(toks))
	for i, t := range toks {
		text[i] = byte(t)
	}
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), map[string]any{"text": string(text), "prompt_tokens": len(prompt), "generated_tokens": len(toks) - len(prompt)})
		return nil
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(text))
	return nil
}

// loadModelFile loads a GPT from a safetensors file or a checkpoint directory.
func loadModelFile(path string, heads int) (*model.GPT, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		ck, err := parallel.LoadCheckpoint(path)
		if err != nil {
			return nil, err
		}
		path = filepath.Join(ck.Dir, parallel.ModelFile)
	}
	tf, err := model.ReadSafetensors(path)
	if err != nil {
		return nil, err
	}
	cfg, err := model.ConfigFromCheckpoint(tf, heads)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Vocab > 256 {
		return nil, fmt.Errorf("%s: vocabulary of %d; generate speaks byte-level models (256) only", path, cfg.Vocab)
	}
	g := model.New(cfg, 0)
	if err := model.LoadParams(tf, g.Params()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

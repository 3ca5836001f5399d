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
	adapter    string
	tokenizer  string
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
		Long: `Sample text from a checkpoint of any model family: a model.safetensors file, a
checkpoint directory written by meshnode train --out (the latest step is used), or a
Hugging Face model directory (config.json, model.safetensors or a sharded index, and its
tokenizer.json; meshnode export writes one).

Text goes through the checkpoint's tokenizer: --tokenizer, else the tokenizer.json that
meshnode train --tokenizer left in the step directory, the --out directory above it, or
beside the safetensors file. Without one, text is bytes and the model's vocabulary must be
256.`,
		Example: `  meshnode generate --checkpoint ckpt --prompt "func main() {" --tokens 200
  meshnode generate --checkpoint ./gpt2-hf --prompt "Hello" --temperature 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.checkpoint, "checkpoint", "", "model.safetensors, a checkpoint directory, or a Hugging Face model directory (required)")
	f.StringVar(&o.adapter, "lora-adapter", "", "a PEFT LoRA adapter directory (meshnode lora-export) to apply to the checkpoint's model, its base")
	f.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json (default: the checkpoint's; none: bytes)")
	f.StringVar(&o.prompt, "prompt", "\n", "text to continue")
	f.IntVar(&o.sample.Tokens, "tokens", o.sample.Tokens, "tokens (bytes) to generate")
	f.Float64Var(&o.sample.Temperature, "temperature", o.sample.Temperature, "sampling temperature; 0 is greedy")
	f.IntVar(&o.sample.TopK, "top-k", o.sample.TopK, "sample among the K most likely tokens; 0: all")
	f.Float64Var(&o.sample.TopP, "top-p", 0, "sample among the most likely tokens whose probabilities add up to P (nucleus); 0 or 1: all")
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
	case o.sample.TopP < 0 || o.sample.TopP > 1:
		return usagef("--top-p must be between 0 and 1 (got %g)", o.sample.TopP)
	case o.prompt == "":
		return usagef("--prompt must not be empty")
	}
	g, err := loadModelFile(o.checkpoint, o.heads)
	if err != nil {
		return usagef("--checkpoint: %v", err)
	}
	if o.adapter != "" {
		if g.Layers, err = model.LoadPEFTAdapter(o.adapter, g.Config, g.Layers); err != nil {
			return usagef("--lora-adapter: %v", err)
		}
	}
	codec, err := o.textCodec(g.Config.Vocab)
	if err != nil {
		return err
	}
	if codec.tok != nil {
		o.sample.Vocab = codec.tok.VocabSize() // never an id of the model's padding
	}
	prompt, err := codec.encode([]byte(o.prompt))
	if err != nil {
		return usagef("--prompt: %v", err)
	}
	toks, err := model.Generate(g, prompt, o.sample)
	if err != nil {
		return usagef("--prompt: %v", err)
	}
	text, err := codec.decode(toks)
	if err != nil {
		return fmt.Errorf("decode the generated tokens: %w", err)
	}
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), map[string]any{"text": string(text), "prompt_tokens": len(prompt), "generated_tokens": len(toks) - len(prompt)})
		return nil
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(text))
	return nil
}

// loadModelFile loads a GPT from a safetensors file, a checkpoint directory (a LoRA run's:
// its adapters on its base) or a Hugging Face model directory.
func loadModelFile(path string, heads int) (*model.GPT, error) {
	if model.IsHFDir(path) {
		m, err := model.LoadHF(path)
		if err != nil {
			return nil, err
		}
		g := model.New(m.Config, 0)
		if err := model.LoadParams(m.Weights, g.Params()); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return g, nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		ck, err := parallel.LoadCheckpoint(path)
		if err != nil {
			return nil, err
		}
		if ck.Config.LoRA != nil { // adapters only: on the base its run was initialised from
			return parallel.CheckpointModel(ck)
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
	g := model.New(cfg, 0)
	if err := model.LoadParams(tf, g.Params()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

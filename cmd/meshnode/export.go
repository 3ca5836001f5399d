package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

type exportOptions struct {
	api        apiOptions
	out        string
	step       int
	checkpoint string
	heads      int
}

func newExportCmd() *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export [ID] --out DIR|model.safetensors",
		Short: "Write a job's or a checkpoint's model as a Hugging Face directory or one safetensors file",
		Long: `Export assembles the latest complete checkpoint of a job (or --step N) from its stages'
files, fetched by hash from the nodes that hold them; with --checkpoint instead of a job
ID it reads a local checkpoint (meshnode train --out, or a model.safetensors file).

--out DIR writes a Hugging Face model directory that transformers'
AutoModelForCausalLM.from_pretrained loads: config.json (GPT2LMHeadModel or
LlamaForCausalLM), model.safetensors (Hugging Face's names, float32, a tied head left
out), generation_config.json, and the tokenizer's tokenizer.json, tokenizer_config.json
and special_tokens_map.json when the model was trained with one. meshnode train --init and
meshnode generate --checkpoint read it back.

--out FILE.safetensors writes one safetensors file with the model's shape in its metadata
(and the tokenizer.json beside it), as before.`,
		Example: `  meshnode export 3f9a1c2e7b4d --out gpt2-mesh
  meshnode export --checkpoint ckpt --out ckpt-hf
  meshnode export 3f9a1c2e7b4d --out model.safetensors
  meshnode generate --checkpoint gpt2-mesh --prompt "func main() {"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	addAPIFlags(cmd, &o.api)
	cmd.Flags().StringVar(&o.out, "out", "", "a directory for a Hugging Face model, or a .safetensors file (required)")
	cmd.Flags().IntVar(&o.step, "step", -1, "export this checkpoint step instead of the latest complete one")
	cmd.Flags().StringVar(&o.checkpoint, "checkpoint", "", "export a local checkpoint (a train --out directory, a step directory or a model.safetensors file) instead of a job's")
	cmd.Flags().IntVar(&o.heads, "heads", 0, "with --checkpoint: attention heads, for files whose metadata lacks n_head")
	return cmd
}

func (o *exportOptions) run(cmd *cobra.Command, args []string) error {
	switch {
	case o.out == "":
		return usagef("--out is required")
	case o.checkpoint != "" && len(args) == 1:
		return usagef("give a job ID or --checkpoint, not both")
	case o.checkpoint == "" && len(args) == 0:
		return usagef("give a job ID, or --checkpoint for a local checkpoint")
	case o.checkpoint != "" && cmd.Flags().Changed("step"):
		return usagef("--step chooses a job's checkpoint; with --checkpoint name the step directory")
	}
	hf := !strings.HasSuffix(o.out, ".safetensors")
	dir := filepath.Dir(o.out)
	if hf {
		dir = o.out
	}
	if err := checkWritableDir(dir); err != nil {
		return usagef("--out: %v", err)
	}
	if o.checkpoint != "" {
		return o.exportLocal(cmd, hf)
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	raw, err := c.Export(cmd.Context(), args[0], o.step)
	if err != nil {
		return jobErr(args[0], err)
	}
	tf, err := model.DecodeSafetensors(raw)
	if err != nil {
		return fmt.Errorf("export of job %s: the node sent an unreadable file: %w", args[0], err)
	}
	if !hf {
		if err := model.WriteFileAtomic(o.out, raw); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s)\n", o.out, humanBytes(int64(len(raw))))
		return exportTokenizer(cmd, c, args[0], filepath.Join(filepath.Dir(o.out), TokenizerFile))
	}
	cfg, err := model.ConfigFromCheckpoint(tf, 0)
	if err != nil {
		return fmt.Errorf("export of job %s: %w", args[0], err)
	}
	tok, err := jobTokenizer(cmd, c, args[0])
	if err != nil {
		return err
	}
	meta := map[string]string{"job": tf.Metadata["job"], "step": tf.Metadata["step"]}
	return o.writeHF(cmd, model.HFExport{Config: cfg, Weights: tf.Tensors, Tokenizer: tok, Metadata: meta})
}

// exportLocal exports a checkpoint on this machine, with the tokenizer found beside it.
func (o *exportOptions) exportLocal(cmd *cobra.Command, hf bool) error {
	g, err := loadModelFile(o.checkpoint, o.heads)
	if err != nil {
		return usagef("--checkpoint: %v", err)
	}
	var tok []byte
	if p := findTokenizer(o.checkpoint); p != "" {
		if tok, err = os.ReadFile(p); err != nil {
			return err
		}
	}
	if !hf {
		if err := model.WriteSafetensors(o.out, model.ParamTensors(g.Params()), g.Config.Metadata()); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", o.out)
		if tok == nil {
			return nil
		}
		return model.WriteFileAtomic(filepath.Join(filepath.Dir(o.out), TokenizerFile), tok)
	}
	return o.writeHF(cmd, model.HFExport{Config: g.Config, Weights: model.ParamTensors(g.Params()), Tokenizer: tok})
}

func (o *exportOptions) writeHF(cmd *cobra.Command, e model.HFExport) error {
	if err := model.WriteHF(o.out, e); err != nil {
		return err
	}
	what := "bytes (no tokenizer)"
	if e.Tokenizer != nil {
		what = "its tokenizer"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: a Hugging Face %s model (%d layers, d %d, vocab %d) with %s\n",
		o.out, e.Config.FamilyName(), e.Config.Layers, e.Config.DModel, e.Config.Vocab, what)
	return nil
}

// jobTokenizer is the tokenizer.json a job trained with, nil when it trained on bytes or
// .bin ids (the node answers 404).
func jobTokenizer(cmd *cobra.Command, c *api.Client, id string) ([]byte, error) {
	tok, err := c.Tokenizer(cmd.Context(), id)
	if api.StatusCode(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, jobErr(id, err)
	}
	if _, err := tokenizer.Parse(tok, "the tokenizer of job "+id); err != nil {
		return nil, fmt.Errorf("export of job %s: the node sent an unreadable tokenizer: %w", id, err)
	}
	return tok, nil
}

// exportTokenizer writes the job's tokenizer to path when it has one.
func exportTokenizer(cmd *cobra.Command, c *api.Client, id, path string) error {
	tok, err := jobTokenizer(cmd, c, id)
	if err != nil || tok == nil {
		return err
	}
	if err := model.WriteFileAtomic(path, tok); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", path)
	return nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

type loraExportOptions struct {
	out   string
	merge bool
}

func newLoRAExportCmd() *cobra.Command {
	o := &loraExportOptions{}
	cmd := &cobra.Command{
		Use:   "lora-export CHECKPOINT --out DIR",
		Short: "Write a LoRA fine-tune's adapters as a PEFT adapter, or merged into its base",
		Long: `lora-export reads a checkpoint of meshnode train --lora-rank (a step-N directory, or an --out
directory's latest step) and its base (the run's --init), and writes to --out either a
Hugging Face PEFT adapter directory (adapter_config.json and adapter_model.safetensors,
tensors named base_model.model.<module>.lora_A.weight and lora_B.weight), or with --merge
one model.safetensors whose weights are the base's with scale·B·A added, which meshnode
generate loads as a plain model. docs/lora.md.`,
		Example: `  meshnode lora-export ft --out adapter
  meshnode lora-export ft --merge --out merged && meshnode generate --checkpoint merged/model.safetensors`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	cmd.Flags().StringVar(&o.out, "out", "", "the directory to write (required)")
	cmd.Flags().BoolVar(&o.merge, "merge", false, "write the base with the adapters merged in, as one model.safetensors")
	return cmd
}

func (o *loraExportOptions) run(cmd *cobra.Command, path string) error {
	if o.out == "" {
		return usagef("--out is required")
	}
	if err := checkWritableDir(o.out); err != nil {
		return usagef("--out: %v", err)
	}
	ck, err := parallel.LoadCheckpoint(path)
	if err != nil {
		return usagef("CHECKPOINT: %v", err)
	}
	if ck.Config.LoRA == nil {
		return usagef("CHECKPOINT: %s is not a LoRA fine-tune (it was trained without --lora-rank)", ck.Dir)
	}
	g, err := parallel.CheckpointModel(ck)
	if err != nil {
		return err
	}
	if !o.merge {
		if err := model.WritePEFTAdapter(o.out, g.Config, *ck.Config.LoRA, g.Layers, ck.Config.Init); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s in %s\n", model.PEFTConfigFile, model.PEFTWeightsFile, o.out)
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	file := filepath.Join(o.out, parallel.ModelFile)
	meta := g.Config.Metadata()
	meta["step"] = fmt.Sprint(ck.Step)
	if err := model.WriteSafetensors(file, model.MergedWeights(g.Layers), meta); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", file)
	return nil
}

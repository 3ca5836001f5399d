package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// loraOptions are train's LoRA flags (the base comes from --init, trainOptions.init).
type loraOptions struct {
	rank    int
	alpha   float64
	targets string
}

func (l *loraOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&l.rank, "lora-rank", 0, "fine-tune LoRA adapters of this rank on the frozen base (0: train every weight); docs/lora.md")
	f.Float64Var(&l.alpha, "lora-alpha", 0, "LoRA's alpha: the adapters are scaled by alpha/rank (0: the rank)")
	f.StringVar(&l.targets, "lora-targets", "attn", "comma-separated modules that get adapters: llama q,k,v,o,gate,up,down; gpt/gpt2 qkv,o,up,down; attn and mlp for all of either")
}

// apply sets cfg's Init and LoRA from the flags given: init is --init's path, read by the
// engine (parallel.ReadInitWeights) when it is a meshnode checkpoint, or a Hugging Face
// directory under LoRA (whose frozen base every stage reads; without LoRA the trainer
// restores a Hugging Face directory's weights at step 0, train_init.go). A resumed run
// keeps its checkpoint's: giving them with --resume is an error.
func (l *loraOptions) apply(cmd *cobra.Command, cfg *parallel.TrainConfig, init string, resumed bool) error {
	changed := cmd.Flags().Changed
	for _, name := range []string{"init", "lora-rank", "lora-alpha", "lora-targets"} {
		if resumed && changed(name) {
			return usagef("--%s conflicts with --resume (a resumed run keeps its base and adapters)", name)
		}
	}
	if resumed {
		return nil
	}
	if init != "" && (!model.IsHFDir(init) || changed("lora-rank")) {
		cfg.Init = init
	}
	if !changed("lora-rank") {
		if changed("lora-alpha") || changed("lora-targets") {
			return usagef("--lora-alpha and --lora-targets need --lora-rank")
		}
		return nil
	}
	lo := &jobspec.LoRA{Rank: l.rank, Alpha: l.alpha}
	for _, t := range strings.Split(l.targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			lo.Targets = append(lo.Targets, t)
		}
	}
	switch {
	case l.rank < 1 || l.rank > jobspec.MaxLoRARank:
		return usagef("--lora-rank must be between 1 and %d (got %d)", jobspec.MaxLoRARank, l.rank)
	case l.alpha < 0:
		return usagef("--lora-alpha must be ≥ 0 (got %v)", l.alpha)
	}
	if _, err := lo.Modules("--lora-targets", cfg.Model.FamilyName()); err != nil {
		return usagef("%v", err)
	}
	cfg.LoRA = lo
	return nil
}

// loraJSON is the line a LoRA run prints first with -o json.
type loraJSON struct {
	Event             string  `json:"event"`
	TrainableParams   int64   `json:"trainable_params"`
	TotalParams       int64   `json:"total_params"`
	TrainableFraction float64 `json:"trainable_fraction"`
}

// report prints how many of the model's parameters a LoRA run trains (nothing for a run
// without LoRA).
func (l *loraOptions) report(w io.Writer, cfg parallel.TrainConfig, asJSON bool) {
	if cfg.LoRA == nil {
		return
	}
	trainable, total, err := cfg.TrainableParams()
	if err != nil {
		return // validated before: unreachable
	}
	frac := float64(trainable) / float64(total)
	if asJSON {
		writeJSONLine(w, loraJSON{Event: "lora", TrainableParams: trainable, TotalParams: total, TrainableFraction: frac})
		return
	}
	fmt.Fprintf(w, "lora    rank %d, alpha %g: %d of %d parameters trainable (%.3f%%)\n", cfg.LoRA.Rank, cfg.LoRA.Scale()*float64(cfg.LoRA.Rank), trainable, total, 100*frac)
}

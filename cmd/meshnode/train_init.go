package main

import (
	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// loadInit reads --init when it is a Hugging Face model directory: the model becomes config.json's,
// the tokenizer the directory's (none: bytes), and the weights are returned to start from.
// The model's shape is the directory's: only a Llama's --context may be shorter than its
// max_position_embeddings (its positions are rotary; GPT-2's are a table of n_positions).
func (o *trainOptions) loadInit(cmd *cobra.Command) (*model.HFModel, error) {
	if o.init == "" || !model.IsHFDir(o.init) {
		return nil, nil // none, or a checkpoint of meshnode's: the engine reads it (train_lora.go)
	}
	for _, name := range []string{"resume", "preset", "tokenizer"} {
		if cmd.Flags().Changed(name) {
			return nil, usagef("--init conflicts with --%s: the model and its tokenizer are the directory's", name)
		}
	}
	m, err := model.LoadHF(o.init)
	if err != nil {
		return nil, usagef("--init: %v", err)
	}
	given := o.cfg.Model
	o.cfg.Model = m.Config
	for _, name := range modelFlags {
		if !cmd.Flags().Changed(name) {
			continue
		}
		if name != "context" || m.Config.FamilyName() != jobspec.FamilyLlama {
			return nil, usagef("--%s conflicts with --init: the model's shape is %s's config.json (a Llama's --context alone may be shorter)", name, o.init)
		}
		if given.Context < 1 || given.Context > m.Config.Context {
			return nil, usagef("--context must be between 1 and the model's max_position_embeddings %d, got %d", m.Config.Context, given.Context)
		}
		o.cfg.Model.Context = given.Context
	}
	if m.Tokenizer != nil {
		o.data.tok, o.data.tokenizer = m.Tokenizer, m.TokenizerPath
	}
	return m, nil
}

// startFromInit loads the directory's weights into the trainer at step 0, with the
// optimizer of a run that has not stepped.
func (o *trainOptions) startFromInit(tr *parallel.Trainer, m *model.HFModel) error {
	ck := &parallel.Checkpoint{Dir: o.init, Model: m.Weights, Optimizer: parallel.InitialMoments(o.cfg.Model)}
	if err := tr.Restore(ck); err != nil {
		return usagef("--init: %v", err)
	}
	return nil
}

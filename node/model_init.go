package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// A job's model.init: a Hugging Face model directory on the submitting node. The node reads
// it where its path lives, as it reads the corpus, under the same data roots, and turns it
// into what every node of the job can use: the spec's model becomes config.json's, the
// corpus is encoded with the directory's tokenizer.json, and the weights are published as
// a blob (one safetensors file of every parameter under meshnode's names, float32) whose
// ID is model.init_blob. Each node's worker fetches that blob, by hash, and starts from
// it at step 0 (node/runner).

// readInit reads spec's model.init on this node and applies it to the spec: the model's
// fields are config.json's (Init kept; a Llama's context may be the spec's, shorter), and
// data.tokenizer is the directory's
// tokenizer.json unless the spec names its own and the directory has none. Every refusal
// is a model.ErrBadData naming model.init and the file.
func (n *Node) readInit(spec *jobspec.Spec, dataRoot string) (*model.HFModel, error) {
	files := newLocalFiles(dataRoot, n.cfg.DataRoots, n.cfg.MaxDataBytes)
	real, st, err := files.resolve("model.init", spec.Model.Init)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, badData("model.init: %s is not a directory (a Hugging Face model is a directory with config.json)", spec.Model.Init)
	}
	if err := checkInitFiles(files, real); err != nil {
		return nil, err
	}
	m, err := model.LoadHF(real)
	if err != nil {
		return nil, badData("model.init: %v", err)
	}
	if m.TokenizerPath != "" {
		if spec.Data.Tokenizer != "" {
			return nil, badData("data.tokenizer: model.init %s has its own tokenizer.json, which the job uses: leave data.tokenizer out", spec.Model.Init)
		}
		spec.Data.Tokenizer = m.TokenizerPath
	}
	init, ctx := spec.Model.Init, spec.Model.Context
	spec.Model = jobspec.Model(m.Config)
	spec.Model.Init = init
	switch {
	case ctx == 0 || ctx == m.Config.Context:
	case m.Config.FamilyName() != jobspec.FamilyLlama:
		return nil, badData("model.context: %d, but a GPT-2's positions are the %d rows of model.init %s's table (n_positions): leave model.context out", ctx, m.Config.Context, init)
	case ctx > m.Config.Context:
		return nil, badData("model.context: %d is longer than model.init %s's max_position_embeddings %d", ctx, init, m.Config.Context)
	default:
		spec.Model.Context = ctx // rotary positions: a shorter context is the same model
	}
	return m, nil
}

// checkInitFiles refuses a directory with an entry that leads outside the data roots (a
// symlink to /etc) or is larger than the node's limit on a local data file.
func checkInitFiles(files localFiles, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return badData("model.init: %v", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue // a dangling link: LoadHF names it if it is a file it needs
		}
		if !files.allowed(real) {
			return badData("model.init: %s leads outside the allowed data roots", p)
		}
		if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() && st.Size() > files.maxBytes {
			return badData("model.init: %s is %d bytes, more than this node's limit of %d on a data file", p, st.Size(), files.maxBytes)
		}
	}
	return nil
}

// publishInit publishes the initial weights of m as a blob and returns its ID.
func (n *Node) publishInit(ctx context.Context, m *model.HFModel) (string, error) {
	var buf bytes.Buffer
	if err := model.EncodeSafetensors(&buf, m.Weights.Tensors, m.Config.Metadata()); err != nil {
		return "", err
	}
	size := buf.Len()
	id, err := n.data.blobs.Publish(ctx, &buf)
	if err != nil {
		return "", fmt.Errorf("publish the weights of model.init %s: %w", m.Dir, err)
	}
	n.log.Info("published initial weights", "init", m.Dir, "blob", id, "bytes", size)
	return id, nil
}

// publishSpecFiles publishes what spec names on this node: model.init's weights (after
// applying its config.json and tokenizer to the spec) and the corpus, setting the blob IDs
// and the vocabulary, and validates the spec they complete.
func (n *Node) publishSpecFiles(ctx context.Context, spec *jobspec.Spec, dataRoot string) error {
	var m *model.HFModel
	if spec.Model.Init != "" {
		var err error
		if m, err = n.readInit(spec, dataRoot); err != nil {
			return err
		}
	}
	vocab := spec.Model.Vocab
	if m != nil && spec.Data.Tokenizer != "" {
		vocab = 0 // the tokenizer's, which may be smaller than the model's padded one
	}
	var err error
	spec.Data, vocab, err = n.PublishJobData(ctx, spec.Data, vocab, dataRoot)
	if err != nil {
		return err
	}
	if m == nil {
		spec.Model.Vocab = vocab
		if spec.Data.Tokenizer != "" {
			return spec.Validate() // the tokenizer's vocabulary is known only now
		}
		return nil
	}
	if vocab > m.Config.Vocab {
		return badData("data: the corpus holds ids of a vocabulary of %d, model.init %s's model has %d", vocab, spec.Model.Init, m.Config.Vocab)
	}
	if spec.Model.InitBlob, err = n.publishInit(ctx, m); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return badData("%v", err)
	}
	return nil
}

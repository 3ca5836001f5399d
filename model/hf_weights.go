package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
)

// The weights of a Hugging Face model directory: model.safetensors, or shards that
// model.safetensors.index.json maps every tensor to. Tensors may be F32, F16 or BF16
// (widened to float32 exactly). meshnode's parameter names are Hugging Face's:
// GPT2LMHeadModel's (transformer.h.N.attn.c_attn.weight, Conv1D weights stored [in, out],
// which is meshnode's layout too: nothing is transposed) and LlamaForCausalLM's
// (model.layers.N.self_attn.q_proj.weight, nn.Linear weights [out, in], as meshnode's).
// GPT-2 files written by GPT2Model rather than GPT2LMHeadModel lack the "transformer."
// prefix; it is added. Buffers that are not weights (GPT-2's attn.bias and
// attn.masked_bias causal masks, Llama's rotary_emb.inv_freq) are skipped unread.

// Names of the weight files in a Hugging Face model directory.
const (
	HFWeightsFile = "model.safetensors"
	HFIndexFile   = "model.safetensors.index.json"
)

// hfIndex is model.safetensors.index.json.
type hfIndex struct {
	WeightMap map[string]string `json:"weight_map"`
}

// hfTensorName maps a tensor name of a Hugging Face file of family fam to meshnode's;
// keep is false for buffers that are not weights.
func hfTensorName(fam jobspec.Family, name string) (string, bool) {
	if fam == jobspec.FamilyLlama {
		return name, !strings.HasSuffix(name, ".rotary_emb.inv_freq")
	}
	if strings.HasSuffix(name, ".attn.bias") || strings.HasSuffix(name, ".attn.masked_bias") {
		return name, false
	}
	if name != "lm_head.weight" && !strings.HasPrefix(name, "transformer.") {
		return "transformer." + name, true
	}
	return name, true
}

// readHFWeights reads the weights of the model directory dir for cfg: every parameter of
// cfg's model under meshnode's name, float32. The error names the file and the tensor: a
// missing one, one of the wrong shape, one the model does not have.
func readHFWeights(dir string, cfg Config) (*TensorFile, error) {
	fam := cfg.FamilyName()
	keep := func(name string) bool { _, ok := hfTensorName(fam, name); return ok }
	from := map[string]string{} // meshnode name → the file that held it
	weights := &TensorFile{Tensors: map[string]*kernels.Tensor{}, Metadata: map[string]string{}}
	add := func(file string, tf *TensorFile) {
		for name, t := range tf.Tensors {
			n, _ := hfTensorName(fam, name)
			weights.Tensors[n], from[n] = t, file
		}
	}
	index := filepath.Join(dir, HFIndexFile)
	single := filepath.Join(dir, HFWeightsFile)
	listed := single // the file a missing tensor is reported against
	switch {
	case fileExists(index):
		listed = index
		shards, err := readHFIndex(index)
		if err != nil {
			return nil, err
		}
		for _, shard := range sortedKeys(shards) {
			names := shards[shard]
			path := filepath.Join(dir, shard)
			tf, err := readHFSafetensors(path, func(n string) bool { return !names[n] || !keep(n) })
			if err != nil {
				return nil, err
			}
			for n := range names {
				if _, ok := tf.Tensors[n]; !ok && keep(n) {
					return nil, fmt.Errorf("%s: tensor %s is missing (%s maps it to this file)", path, n, HFIndexFile)
				}
			}
			add(path, tf)
		}
	case fileExists(single):
		tf, err := readHFSafetensors(single, func(n string) bool { return !keep(n) })
		if err != nil {
			return nil, err
		}
		add(single, tf)
	default:
		return nil, fmt.Errorf("%s: no %s or %s: no weights to load", dir, HFWeightsFile, HFIndexFile)
	}
	if err := matchHFWeights(cfg, weights, from, listed); err != nil {
		return nil, err
	}
	return weights, nil
}

// readHFSafetensors decodes one safetensors file, widening half precision, leaving out the
// tensors skip names.
func readHFSafetensors(path string, skip func(string) bool) (*TensorFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	tf, err := decodeSafetensors(b, decodeOptions{widen: true, skip: skip})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tf, nil
}

// readHFIndex reads model.safetensors.index.json into shard file → the tensors it holds.
// A shard must be a plain file name in the directory.
func readHFIndex(path string) (map[string]map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	var idx hfIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors index: %v", path, oneLine(err))
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", path)
	}
	shards := map[string]map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." || !strings.HasSuffix(shard, ".safetensors") {
			return nil, fmt.Errorf("%s: weight_map puts %s in %q, not a .safetensors file of this directory", path, name, shard)
		}
		if shards[shard] == nil {
			shards[shard] = map[string]bool{}
		}
		shards[shard][name] = true
	}
	return shards, nil
}

// matchHFWeights checks weights against cfg's parameters: each present with its shape, no
// other tensor (a tied head's lm_head, when stored anyway, must equal the embedding and is
// dropped). listed is the file a missing tensor is reported against.
func matchHFWeights(cfg Config, weights *TensorFile, from map[string]string, listed string) error {
	params := LayerParams(NewLayerShells(cfg, 0, cfg.NumLayers()))
	want := make(map[string]bool, len(params))
	for _, p := range params {
		want[p.Name] = true
		t, ok := weights.Tensors[p.Name]
		if !ok {
			return fmt.Errorf("%s: tensor %s is missing (config.json describes a %s model that has it)", listed, p.Name, cfg.FamilyName())
		}
		if !t.SameShape(p.Value.Shape) {
			return fmt.Errorf("%s: tensor %s has shape %v; config.json's model needs %v", from[p.Name], p.Name, t.Shape, p.Value.Shape)
		}
	}
	if head, ok := weights.Tensors["lm_head.weight"]; ok && cfg.TiedHead() {
		emb := params[0].Name
		if !slices.Equal(head.Data, weights.Tensors[emb].Data) || !head.SameShape(weights.Tensors[emb].Shape) {
			return fmt.Errorf("%s: tensor lm_head.weight differs from %s, but config.json ties them (tie_word_embeddings)", from["lm_head.weight"], emb)
		}
		delete(weights.Tensors, "lm_head.weight")
	}
	for _, name := range sortedKeys(weights.Tensors) {
		if !want[name] {
			return fmt.Errorf("%s: tensor %s is not a weight of meshnode's %s model (another architecture, or config.json does not match the weights)", from[name], name, cfg.FamilyName())
		}
	}
	return nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// unwrapPath drops the path an *os.PathError repeats, so the message names the file once.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

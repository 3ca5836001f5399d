package model

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
)

// hfCases are small models of each family exported and imported below.
var hfCases = map[string]Config{
	"gpt":        {Layers: 2, DModel: 16, Heads: 2, Context: 8, Vocab: 300},
	"gpt2":       {Family: jobspec.FamilyGPT2, Layers: 2, DModel: 16, Heads: 2, Context: 8, Vocab: 300, NormEps: 1e-6},
	"llama":      {Family: jobspec.FamilyLlama, Layers: 2, DModel: 16, Heads: 4, KVHeads: 2, Intermediate: 24, Context: 8, Vocab: 300, RopeTheta: 500000},
	"llama-tied": {Family: jobspec.FamilyLlama, Layers: 1, DModel: 16, Heads: 4, KVHeads: 1, Intermediate: 24, Context: 8, Vocab: 300, Tied: true},
}

// normalized is cfg with every default spelled out, to compare configurations.
func normalized(c Config) jobspec.Model {
	m := jobspec.Model(c)
	m.Family, m.KVHeads, m.Intermediate, m.NormEps, m.Tied = m.FamilyName(), m.KVHeadCount(), m.Hidden(), m.Eps(), m.TiedHead()
	if m.Family == jobspec.FamilyLlama {
		m.RopeTheta = m.Theta()
	}
	return m
}

func exportTiny(t *testing.T, cfg Config, tok []byte) (string, *GPT) {
	t.Helper()
	g := New(cfg, 11)
	dir := filepath.Join(t.TempDir(), "hf")
	if err := WriteHF(dir, HFExport{Config: cfg, Weights: ParamTensors(g.Params()), Tokenizer: tok}); err != nil {
		t.Fatal(err)
	}
	return dir, g
}

// TestHFExportImportIsBitIdentical: a model of each family exported as a Hugging Face
// directory imports to the same configuration and the same bits, and exporting the import
// writes the same safetensors bytes again.
func TestHFExportImportIsBitIdentical(t *testing.T) {
	for name, cfg := range hfCases {
		dir, g := exportTiny(t, cfg, nil)
		m, err := LoadHF(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if normalized(m.Config) != normalized(cfg) {
			t.Fatalf("%s: imported %+v, exported %+v", name, normalized(m.Config), normalized(cfg))
		}
		if len(m.Weights.Tensors) != len(g.Params()) {
			t.Fatalf("%s: %d tensors imported, the model has %d", name, len(m.Weights.Tensors), len(g.Params()))
		}
		for _, p := range g.Params() {
			got := m.Weights.Tensors[p.Name]
			for i, v := range p.Value.Data {
				if math.Float32bits(got.Data[i]) != math.Float32bits(v) {
					t.Fatalf("%s: %s[%d] = %v imported, %v exported", name, p.Name, i, got.Data[i], v)
				}
			}
		}
		again := filepath.Join(t.TempDir(), "again")
		if err := WriteHF(again, HFExport{Config: m.Config, Weights: m.Weights.Tensors}); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(filepath.Join(dir, HFWeightsFile))
		b, _ := os.ReadFile(filepath.Join(again, HFWeightsFile))
		if string(a) != string(b) {
			t.Fatalf("%s: re-exporting the import writes different bytes", name)
		}
		if cfg.TiedHead() {
			tf, _ := ReadSafetensors(filepath.Join(dir, HFWeightsFile))
			if _, ok := tf.Tensors["lm_head.weight"]; ok {
				t.Fatalf("%s: a tied head is written (save_pretrained leaves it out)", name)
			}
		}
	}
}

// TestHFExportWritesTransformersFiles: the directory has what from_pretrained reads:
// config.json with architectures, model_type and torch_dtype; the "pt" format in the
// safetensors metadata; the tokenizer's files with its special tokens.
func TestHFExportWritesTransformersFiles(t *testing.T) {
	tok, err := os.ReadFile("../tokenizer/testdata/gpt2-style-2048.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Family: jobspec.FamilyGPT2, Layers: 1, DModel: 8, Heads: 2, Context: 8, Vocab: 2048}
	dir, _ := exportTiny(t, cfg, tok)
	var conf map[string]any
	readJSON(t, filepath.Join(dir, HFConfigFile), &conf)
	if conf["model_type"] != "gpt2" || conf["torch_dtype"] != "float32" || conf["architectures"].([]any)[0] != "GPT2LMHeadModel" || conf["n_embd"] != 8.0 {
		t.Fatalf("config.json: %v", conf)
	}
	var special, gen, tc map[string]any
	readJSON(t, filepath.Join(dir, HFSpecialTokensFile), &special)
	readJSON(t, filepath.Join(dir, HFGenerationConfigFile), &gen)
	readJSON(t, filepath.Join(dir, HFTokenizerConfigFile), &tc)
	if special["eos_token"] != "<|endoftext|>" || gen["eos_token_id"] != conf["eos_token_id"] || gen["eos_token_id"] == nil || tc["tokenizer_class"] != "PreTrainedTokenizerFast" {
		t.Fatalf("special tokens %v, generation %v, tokenizer_config %v", special, gen, tc)
	}
	tf, err := ReadSafetensors(filepath.Join(dir, HFWeightsFile))
	if err != nil || tf.Metadata["format"] != "pt" {
		t.Fatalf("metadata %v, %v", tf.Metadata, err)
	}
	m, err := LoadHF(dir)
	if err != nil || m.Tokenizer == nil || m.Tokenizer.VocabSize() != 2048 {
		t.Fatalf("import with a tokenizer: %v", err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// rawTensor is one tensor of a hand-written safetensors file.
type rawTensor struct {
	dtype string
	shape []int
	data  []byte
}

// writeRaw writes tensors in any dtype, as files written elsewhere hold them.
func writeRaw(t testing.TB, path string, tensors map[string]rawTensor) {
	t.Helper()
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, n := range names {
		r := tensors[n]
		header[n] = map[string]any{"dtype": r.dtype, "shape": r.shape, "data_offsets": []int{len(data), len(data) + len(r.data)}}
		data = append(data, r.data...)
	}
	hj, _ := json.Marshal(header)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	out = append(append(out, hj...), data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// halve encodes a tensor as BF16 (truncating) or F16 (rounding).
func halve(tt *kernels.Tensor, dtype string) rawTensor {
	b := make([]byte, 0, 2*len(tt.Data))
	for _, v := range tt.Data {
		if dtype == "BF16" {
			b = binary.LittleEndian.AppendUint16(b, uint16(math.Float32bits(v)>>16))
		} else {
			b = binary.LittleEndian.AppendUint16(b, float16.Fromfloat32(v).Bits())
		}
	}
	return rawTensor{dtype, tt.Shape, b}
}

// TestHFImportHalfPrecisionShardsAndGPT2Names: BF16 and F16 weights are widened exactly;
// shards listed by an index load; GPT-2 names without "transformer." and its causal-mask
// buffers (as GPT2Model writes them) load as GPT2LMHeadModel's.
func TestHFImportHalfPrecisionShardsAndGPT2Names(t *testing.T) {
	cfg := hfCases["gpt2"]
	src, g := exportTiny(t, cfg, nil)
	for _, dtype := range []string{"BF16", "F16"} {
		dir := t.TempDir()
		conf, _ := os.ReadFile(filepath.Join(src, HFConfigFile))
		os.WriteFile(filepath.Join(dir, HFConfigFile), conf, 0o644)
		shards := []map[string]rawTensor{{}, {}}
		weightMap := map[string]string{}
		for i, p := range g.Params() {
			name := strings.TrimPrefix(p.Name, "transformer.")
			shards[i%2][name] = halve(p.Value, dtype)
			weightMap[name] = []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i%2]
		}
		shards[0]["h.0.attn.bias"] = rawTensor{"F32", []int{1, 1, 8, 8}, make([]byte, 4*64)}
		weightMap["h.0.attn.bias"] = "model-00001-of-00002.safetensors"
		writeRaw(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), shards[0])
		writeRaw(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), shards[1])
		idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
		os.WriteFile(filepath.Join(dir, HFIndexFile), idx, 0o644)
		m, err := LoadHF(dir)
		if err != nil {
			t.Fatalf("%s: %v", dtype, err)
		}
		for _, p := range g.Params() {
			want := halve(p.Value, dtype).data
			for i, v := range m.Weights.Tensors[p.Name].Data {
				back := halve(&kernels.Tensor{Shape: []int{1}, Data: []float32{v}}, dtype).data
				if back[0] != want[2*i] || back[1] != want[2*i+1] {
					t.Fatalf("%s: %s[%d] = %v does not round-trip to its %s bits", dtype, p.Name, i, v, dtype)
				}
			}
		}
	}
}

// TestHFImportRefusesBadInput: every kind of bad directory is refused with one line that
// names the file and what is wrong.
func TestHFImportRefusesBadInput(t *testing.T) {
	cfg := hfCases["llama"]
	gpt2 := hfCases["gpt2"]
	tokJSON, err := os.ReadFile("../tokenizer/testdata/gpt2-style-2048.json")
	if err != nil {
		t.Fatal(err)
	}
	editConfig := func(edit func(map[string]any)) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			var c map[string]any
			readJSON(t, filepath.Join(dir, HFConfigFile), &c)
			edit(c)
			b, _ := json.Marshal(c)
			os.WriteFile(filepath.Join(dir, HFConfigFile), b, 0o644)
		}
	}
	editWeights := func(edit func(tf *TensorFile)) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, HFWeightsFile)
			tf, err := ReadSafetensors(path)
			if err != nil {
				t.Fatal(err)
			}
			edit(tf)
			if err := WriteSafetensors(path, tf.Tensors, tf.Metadata); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name   string
		model  Config
		break_ func(t *testing.T, dir string)
		file   string // the file the error must name
		want   string
	}{
		{"unknown model_type", cfg, editConfig(func(c map[string]any) { c["model_type"] = "bert" }), HFConfigFile, `model_type: "bert" is not a family`},
		{"no model_type", cfg, editConfig(func(c map[string]any) { delete(c, "model_type") }), HFConfigFile, "model_type: missing"},
		{"missing field", cfg, editConfig(func(c map[string]any) { delete(c, "hidden_size") }), HFConfigFile, "hidden_size: missing"},
		{"gpt2 missing field", gpt2, editConfig(func(c map[string]any) { delete(c, "n_embd") }), HFConfigFile, "n_embd: missing"},
		{"field of the wrong type", cfg, editConfig(func(c map[string]any) { c["num_hidden_layers"] = "two" }), HFConfigFile, "not a config.json"},
		{"impossible shape", cfg, editConfig(func(c map[string]any) { c["num_attention_heads"] = 3; delete(c, "head_dim") }), HFConfigFile, "cannot build"},
		{"other activation", cfg, editConfig(func(c map[string]any) { c["hidden_act"] = "gelu" }), HFConfigFile, "hidden_act"},
		{"interleaved rotation", cfg, editConfig(func(c map[string]any) { c["rope_interleaved"] = true }), HFConfigFile, "rope_interleaved: true"},
		{"gpt2 attention scaled by layer", gpt2, editConfig(func(c map[string]any) { c["scale_attn_by_inverse_layer_idx"] = true }), HFConfigFile, "scale_attn_by_inverse_layer_idx: true"},
		{"gpt2 other activation", gpt2, editConfig(func(c map[string]any) { c["activation_function"] = "relu" }), HFConfigFile, `activation_function: "relu"`},
		{"rope scaling", cfg, editConfig(func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "linear", "factor": 2} }), HFConfigFile, "rope_scaling"},
		{"malformed config.json", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, HFConfigFile), []byte("{\"model_type\": \"llama\",\n"), 0o644)
		}, HFConfigFile, "not a config.json"},
		{"no config.json", cfg, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, HFConfigFile)) }, HFConfigFile, "no such file"},
		{"missing tensor", cfg, editWeights(func(tf *TensorFile) { delete(tf.Tensors, "model.layers.1.mlp.up_proj.weight") }), HFWeightsFile, "tensor model.layers.1.mlp.up_proj.weight is missing"},
		{"shape mismatch", cfg, editWeights(func(tf *TensorFile) {
			tf.Tensors["model.layers.0.self_attn.k_proj.weight"] = kernels.NewTensor(16, 16)
		}), HFWeightsFile, "tensor model.layers.0.self_attn.k_proj.weight has shape [16 16]; config.json's model needs [8 16]"},
		{"vocab of config and weights", cfg, editConfig(func(c map[string]any) { c["vocab_size"] = 512 }), HFWeightsFile, "model.embed_tokens.weight has shape [300 16]; config.json's model needs [512 16]"},
		{"unexpected tensor", cfg, editWeights(func(tf *TensorFile) { tf.Tensors["model.layers.0.self_attn.q_proj.bias"] = kernels.NewTensor(16) }), HFWeightsFile, "not a weight of meshnode's llama"},
		{"tied head that differs", hfCases["llama-tied"], editWeights(func(tf *TensorFile) { tf.Tensors["lm_head.weight"] = kernels.NewTensor(300, 16) }), HFWeightsFile, "lm_head.weight differs"},
		{"dtype", cfg, func(t *testing.T, dir string) {
			writeRaw(t, filepath.Join(dir, HFWeightsFile), map[string]rawTensor{"model.norm.weight": {"I64", []int{2}, make([]byte, 16)}})
		}, HFWeightsFile, "has dtype I64; meshnode reads F32, F16 and BF16"},
		{"no weights", cfg, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, HFWeightsFile)) }, "", "no model.safetensors or model.safetensors.index.json"},
		{"malformed index", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, HFIndexFile), []byte(`{"weight_map": [1]}`), 0o644)
		}, HFIndexFile, "not a safetensors index"},
		{"empty index", cfg, func(t *testing.T, dir string) { os.WriteFile(filepath.Join(dir, HFIndexFile), []byte(`{}`), 0o644) }, HFIndexFile, "weight_map is missing or empty"},
		{"shard outside the directory", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, HFIndexFile), []byte(`{"weight_map": {"model.norm.weight": "../x.safetensors"}}`), 0o644)
		}, HFIndexFile, "not a .safetensors file of this directory"},
		{"shard without its tensor", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, HFIndexFile), []byte(`{"weight_map": {"model.norm.weight": "model.safetensors", "model.gone.weight": "model.safetensors"}}`), 0o644)
		}, HFWeightsFile, "tensor model.gone.weight is missing (model.safetensors.index.json maps it to this file)"},
		{"missing shard", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, HFIndexFile), []byte(`{"weight_map": {"model.norm.weight": "model-2.safetensors"}}`), 0o644)
		}, "model-2.safetensors", "no such file"},
		{"vocab of tokenizer and config", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, HFTokenizerFile), tokJSON, 0o644)
		}, HFTokenizerFile, "vocabulary of 2048 tokens is larger than config.json's vocab_size 300"},
		{"malformed tokenizer", cfg, func(t *testing.T, dir string) { os.WriteFile(filepath.Join(dir, HFTokenizerFile), []byte("{"), 0o644) }, HFTokenizerFile, "not a tokenizer.json"},
		{"sentencepiece only", cfg, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "tokenizer.model"), []byte("x"), 0o644)
		}, "tokenizer.model", "tokenizer.json only"},
		{"bytes without a byte vocabulary", Config{Family: jobspec.FamilyLlama, Layers: 1, DModel: 8, Heads: 2, Context: 8, Vocab: 100}, func(*testing.T, string) {}, "", "does not cover the 256 byte values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := exportTiny(t, c.model, nil)
			c.break_(t, dir)
			_, err := LoadHF(dir)
			if err == nil {
				t.Fatal("loaded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.Contains(msg, c.want) || !strings.HasPrefix(msg, filepath.Join(dir, c.file)) {
				t.Fatalf("error %q: want one line starting with %s and saying %q", msg, filepath.Join(dir, c.file), c.want)
			}
		})
	}
}

// TestParseHFConfigReadsEveryField: each family's fields of a published config.json land
// in the model; an untied GPT-2 is meshnode's gpt family.
func TestParseHFConfigReadsEveryField(t *testing.T) {
	cases := []struct {
		json string
		want Config
	}{
		{`{"model_type":"gpt2","n_layer":12,"n_head":12,"n_embd":768,"n_positions":1024,"n_inner":null,"vocab_size":50257,"layer_norm_epsilon":1e-05,"activation_function":"gelu_new","n_ctx":1024,"scale_attn_weights":true,"scale_attn_by_inverse_layer_idx":false,"reorder_and_upcast_attn":false,"bos_token_id":50256}`,
			Config{Family: jobspec.FamilyGPT2, Layers: 12, Heads: 12, DModel: 768, Context: 1024, Vocab: 50257, NormEps: 1e-5}},
		{`{"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":8,"n_positions":16,"n_inner":64,"vocab_size":256,"tie_word_embeddings":false}`,
			Config{Family: jobspec.FamilyGPT, Layers: 2, Heads: 2, DModel: 8, Context: 16, Vocab: 256, Intermediate: 64}},
		{`{"model_type":"llama","hidden_size":64,"intermediate_size":160,"num_hidden_layers":3,"num_attention_heads":8,"num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_theta":500000.0,"max_position_embeddings":256,"tie_word_embeddings":true,"vocab_size":512,"hidden_act":"silu","rope_scaling":null,"head_dim":8,"rope_interleaved":false,"pretraining_tp":1,"attention_bias":false}`,
			Config{Family: jobspec.FamilyLlama, Layers: 3, Heads: 8, KVHeads: 2, DModel: 64, Intermediate: 160, Context: 256, Vocab: 512, NormEps: 1e-6, RopeTheta: 500000, Tied: true}},
	}
	for _, c := range cases {
		got, err := ParseHFConfig([]byte(c.json), "config.json")
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.json, got, c.want)
		}
	}
}

// FuzzDecodeHFSafetensors: the widening decoder of Hugging Face files (F16, BF16, skipped
// buffers) never panics and returns only tensors whose data fills their shape.
func FuzzDecodeHFSafetensors(f *testing.F) {
	dir := f.TempDir()
	tt := &kernels.Tensor{Shape: []int{2, 3}, Data: []float32{1, -2, 0.5, 3e-3, 65504, -0}}
	for i, dtype := range []string{"BF16", "F16"} {
		p := filepath.Join(dir, strconv.Itoa(i))
		writeRaw(f, p, map[string]rawTensor{"w": halve(tt, dtype), "h.0.attn.bias": {"F32", []int{1}, make([]byte, 4)}})
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tf, err := decodeSafetensors(b, decodeOptions{widen: true, skip: func(n string) bool { return strings.HasSuffix(n, ".attn.bias") }})
		if err != nil {
			return
		}
		for name, tensor := range tf.Tensors {
			if kernels.ShapeSize(tensor.Shape) != len(tensor.Data) {
				t.Fatalf("%s: shape %v with %d elements", name, tensor.Shape, len(tensor.Data))
			}
		}
	})
}

// BenchmarkHFImportExport writes and reads a Hugging Face directory of SmolLM-135M's
// shape (30 layers, d 576, 9 heads, 3 key/value heads, intermediate 1536, vocabulary
// 49152, tied: 135 M parameters, 540 MB of float32):
//
//	go test ./model -run X -bench HFImportExport -benchtime 3x
func BenchmarkHFImportExport(b *testing.B) {
	m, err := jobspec.PresetModel("preset", "smollm-135m")
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config(m)
	cfg.Context = 256
	g := New(cfg, 1)
	dir := filepath.Join(b.TempDir(), "hf")
	var bytes int64
	for _, p := range g.Params() {
		bytes += 4 * int64(len(p.Value.Data))
	}
	b.Run("export", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			if err := WriteHF(dir, HFExport{Config: cfg, Weights: ParamTensors(g.Params())}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("import", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			if _, err := LoadHF(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}

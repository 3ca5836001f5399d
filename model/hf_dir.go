package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/tokenizer"
)

// Files of a Hugging Face model directory besides its weights.
const (
	HFTokenizerFile        = "tokenizer.json"
	HFTokenizerConfigFile  = "tokenizer_config.json"
	HFSpecialTokensFile    = "special_tokens_map.json"
	HFGenerationConfigFile = "generation_config.json"
)

// hfOtherTokenizers are tokenizer files meshnode does not read: a directory with one of
// them and no tokenizer.json is refused rather than trained on bytes.
var hfOtherTokenizers = []string{"tokenizer.model", "vocab.json", "merges.txt"}

// HFModel is a Hugging Face model directory read for meshnode: its model, its weights and
// its tokenizer.
type HFModel struct {
	// Dir is the directory.
	Dir string
	// Config is the model config.json describes.
	Config Config
	// Weights holds every parameter of Config's model under meshnode's names, float32.
	Weights *TensorFile
	// Tokenizer is the directory's tokenizer.json; nil when it has none and the model
	// trains on bytes (its vocabulary covers the 256 byte values).
	Tokenizer *tokenizer.Tokenizer
	// TokenizerPath is the tokenizer's file, "" for bytes.
	TokenizerPath string
}

// IsHFDir reports whether path is a directory holding a config.json: a Hugging Face model
// directory, as opposed to a meshnode checkpoint directory.
func IsHFDir(path string) bool { return fileExists(filepath.Join(path, HFConfigFile)) }

// LoadHF reads the Hugging Face model directory dir: config.json, the weights
// (readHFWeights) and tokenizer.json. Every error is one line that names the file and what
// is wrong with it: an unknown model_type, a missing field, a missing tensor or one of
// the wrong shape, a tokenizer larger than the model's vocabulary.
func LoadHF(dir string) (*HFModel, error) {
	cfg, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	m := &HFModel{Dir: dir, Config: cfg}
	if m.Tokenizer, m.TokenizerPath, err = loadHFTokenizer(dir, cfg); err != nil {
		return nil, err
	}
	if m.Weights, err = readHFWeights(dir, cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// ReadHFConfig reads the model of dir's config.json, checking that dir is a directory.
func ReadHFConfig(dir string) (Config, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", dir, unwrapPath(err))
	}
	if !st.IsDir() {
		return Config{}, fmt.Errorf("%s: not a directory (a Hugging Face model is a directory with config.json)", dir)
	}
	path := filepath.Join(dir, HFConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	return ParseHFConfig(b, path)
}

// loadHFTokenizer reads dir's tokenizer.json and checks its vocabulary fits the model's
// (a model's vocabulary may be padded beyond its tokenizer's, never the reverse). Without
// one the model must cover the 256 byte values.
func loadHFTokenizer(dir string, cfg Config) (*tokenizer.Tokenizer, string, error) {
	path := filepath.Join(dir, HFTokenizerFile)
	if !fileExists(path) {
		for _, other := range hfOtherTokenizers {
			if p := filepath.Join(dir, other); fileExists(p) {
				return nil, "", fmt.Errorf("%s: meshnode reads tokenizer.json only (byte-level BPE); convert this tokenizer to one", p)
			}
		}
		if cfg.Vocab < 256 {
			return nil, "", fmt.Errorf("%s: no tokenizer.json, and config.json's vocab_size %d does not cover the 256 byte values to train on bytes", dir, cfg.Vocab)
		}
		return nil, "", nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %s", path, oneLine(unwrapTokenizerErr(err, path)))
	}
	if n := tok.VocabSize(); n > cfg.Vocab {
		return nil, "", fmt.Errorf("%s: vocabulary of %d tokens is larger than config.json's vocab_size %d", path, n, cfg.Vocab)
	}
	return tok, path, nil
}

// unwrapTokenizerErr drops the file name the tokenizer's errors start with.
func unwrapTokenizerErr(err error, path string) error {
	if ce, ok := err.(*tokenizer.ConfigError); ok && ce.File == path {
		return fmt.Errorf("%s: %w", ce.Field, ce.Err)
	}
	return unwrapPath(err)
}

// HFExport is what WriteHF writes: a model, its weights, and its tokenizer (nil: bytes).
type HFExport struct {
	Config Config
	// Weights maps every parameter of Config's model, by meshnode's name, to its value.
	Weights map[string]*kernels.Tensor
	// Tokenizer is the bytes of the tokenizer.json the model was trained with, nil for
	// bytes (the directory then has no tokenizer files).
	Tokenizer []byte
	// Metadata is added to the safetensors file's (the job and step exported).
	Metadata map[string]string
}

// WriteHF writes a Hugging Face model directory that transformers'
// AutoModelForCausalLM.from_pretrained loads: config.json, model.safetensors (Hugging
// Face's names, float32, a tied head left out as save_pretrained does, "format": "pt" in
// the metadata with meshnode's own keys, so meshnode generate reads the file alone too),
// generation_config.json and, with a tokenizer, tokenizer.json, tokenizer_config.json and
// special_tokens_map.json. Each file is written atomically; dir is created.
func WriteHF(dir string, e HFExport) error {
	cfg := e.Config
	params := LayerParams(NewLayerShells(cfg, 0, cfg.NumLayers()))
	tensors := make(map[string]*kernels.Tensor, len(params))
	for _, p := range params {
		t, ok := e.Weights[p.Name]
		if !ok || !t.SameShape(p.Value.Shape) {
			return fmt.Errorf("export: tensor %s is missing or not of shape %v", p.Name, p.Value.Shape)
		}
		tensors[p.Name] = t
	}
	var tok *tokenizer.Tokenizer
	if e.Tokenizer != nil {
		var err error
		if tok, err = tokenizer.Parse(e.Tokenizer, "the exported tokenizer"); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		if tok.VocabSize() > cfg.Vocab {
			return fmt.Errorf("export: the tokenizer's vocabulary of %d is larger than the model's %d", tok.VocabSize(), cfg.Vocab)
		}
	}
	special := hfSpecialTokens(tok)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	meta := cfg.Metadata()
	for k, v := range e.Metadata {
		meta[k] = v
	}
	meta["format"] = "pt"
	if err := WriteSafetensors(filepath.Join(dir, HFWeightsFile), tensors, meta); err != nil {
		return err
	}
	files := map[string]any{}
	conf, err := HFConfigJSON(cfg, special.ids())
	if err != nil {
		return err
	}
	gen := map[string]any{"_from_model_config": true}
	for k, v := range special.ids() {
		gen[k] = v
	}
	files[HFGenerationConfigFile] = gen
	if tok != nil {
		files[HFTokenizerConfigFile] = special.tokenizerConfig(cfg.Context)
		files[HFSpecialTokensFile] = special.names()
	}
	if err := WriteFileAtomic(filepath.Join(dir, HFConfigFile), conf); err != nil {
		return err
	}
	for _, name := range sortedKeys(files) {
		b, err := json.MarshalIndent(files[name], "", "  ")
		if err != nil {
			return err
		}
		if err := WriteFileAtomic(filepath.Join(dir, name), append(b, '\n')); err != nil {
			return err
		}
	}
	if tok != nil {
		return WriteFileAtomic(filepath.Join(dir, HFTokenizerFile), e.Tokenizer)
	}
	return nil
}

// hfSpecial is a tokenizer's beginning- and end-of-text tokens (empty: none).
type hfSpecial struct {
	bos, eos     string
	bosID, eosID uint32
}

// hfBeginNames are the special tokens that begin a text, in the order looked for.
var hfBeginNames = []string{"<|begin_of_text|>", "<s>", "<bos>"}

func hfSpecialTokens(tok *tokenizer.Tokenizer) hfSpecial {
	var s hfSpecial
	if tok == nil {
		return s
	}
	if id, ok := tok.EndOfText(); ok {
		s.eosID, s.eos = id, tokenName(tok, id)
		s.bosID, s.bos = s.eosID, s.eos // GPT-2's <|endoftext|> is both
	}
	for _, name := range hfBeginNames {
		if id, ok := tok.ID(name); ok && tok.IsSpecial(id) {
			s.bosID, s.bos = id, name
			break
		}
	}
	return s
}

func tokenName(tok *tokenizer.Tokenizer, id uint32) string {
	n, _ := tok.Token(id)
	return n
}

func (s hfSpecial) ids() map[string]any {
	m := map[string]any{}
	if s.eos != "" {
		m["eos_token_id"] = s.eosID
	}
	if s.bos != "" {
		m["bos_token_id"] = s.bosID
	}
	return m
}

func (s hfSpecial) names() map[string]any {
	m := map[string]any{}
	if s.eos != "" {
		m["eos_token"] = s.eos
	}
	if s.bos != "" {
		m["bos_token"] = s.bos
	}
	return m
}

func (s hfSpecial) tokenizerConfig(context int) map[string]any {
	m := s.names()
	m["tokenizer_class"] = "PreTrainedTokenizerFast"
	m["model_max_length"] = context
	m["clean_up_tokenization_spaces"] = false
	return m
}

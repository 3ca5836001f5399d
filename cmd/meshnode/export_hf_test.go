package main

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// TestExportJobAsHuggingFaceDirectory: meshnode export ID --out DIR turns the file a node
// assembles (GET /v1/jobs/{id}/export) and the job's tokenizer into a Hugging Face
// directory whose import is the node's weights bit for bit with the tokenizer's files; a
// job trained on bytes (the tokenizer's 404) gets none.
func TestExportJobAsHuggingFaceDirectory(t *testing.T) {
	tok, err := os.ReadFile("../../tokenizer/testdata/llama3-style-2048.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  model.Config
		tok  []byte
	}{
		{"llama with a tokenizer", model.Config{Family: jobspec.FamilyLlama, Layers: 2, DModel: 16, Heads: 4, KVHeads: 2, Intermediate: 32, Context: 16, Vocab: 2048, Tied: true}, tok},
		{"gpt2 on bytes", model.Config{Family: jobspec.FamilyGPT2, Layers: 1, DModel: 16, Heads: 2, Context: 16, Vocab: 256}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := model.New(c.cfg, 5)
			meta := c.cfg.Metadata()
			meta["step"], meta["job"] = "40", "abc123"
			var file bytes.Buffer
			if err := model.EncodeSafetensors(&file, model.ParamTensors(g.Params()), meta); err != nil {
				t.Fatal(err)
			}
			v := api.NewVerifier("t0ken", "")
			mux := http.NewServeMux()
			mux.HandleFunc(api.ProofPath, v.ServeProof)
			mux.HandleFunc("GET /v1/jobs/abc123/export", func(w http.ResponseWriter, r *http.Request) { w.Write(file.Bytes()) })
			mux.HandleFunc("GET /v1/jobs/abc123/tokenizer", func(w http.ResponseWriter, r *http.Request) {
				if c.tok == nil {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusNotFound)
					w.Write([]byte(`{"error": "job abc123 was not trained with a tokenizer"}`))
					return
				}
				w.Write(c.tok)
			})
			srv := httptest.NewServer(v.SignAnswers(mux))
			t.Cleanup(srv.Close)
			t.Setenv("MESHNODE_TOKEN", "t0ken")
			dir := filepath.Join(t.TempDir(), "hf")
			if code, _, errs := runJobCLI(t, "export", "abc123", "--out", dir, "--api", srv.URL); code != 0 {
				t.Fatalf("export: exit %d: %s", code, errs)
			}
			m, err := model.LoadHF(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range g.Params() {
				for i, x := range p.Value.Data {
					if math.Float32bits(m.Weights.Tensors[p.Name].Data[i]) != math.Float32bits(x) {
						t.Fatalf("%s[%d] differs from the node's", p.Name, i)
					}
				}
			}
			if (m.Tokenizer != nil) != (c.tok != nil) || m.Config.Vocab != c.cfg.Vocab {
				t.Fatalf("imported tokenizer %v, vocab %d", m.Tokenizer != nil, m.Config.Vocab)
			}
			_, err = os.Stat(filepath.Join(dir, model.HFTokenizerConfigFile))
			if (err == nil) != (c.tok != nil) {
				t.Fatalf("tokenizer_config.json: %v, the job has a tokenizer: %v", err, c.tok != nil)
			}
			st, err := model.ReadSafetensors(filepath.Join(dir, model.HFWeightsFile))
			if err != nil || st.Metadata["step"] != strconv.Itoa(40) || st.Metadata["job"] != "abc123" {
				t.Fatalf("metadata %v: %v", st.Metadata, err)
			}
		})
	}
}

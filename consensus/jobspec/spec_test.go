package jobspec

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseEmptyIsDefault(t *testing.T) {
	for _, in := range []string{"", "# nothing\n", "{}", "model:\n"} {
		s, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if !reflect.DeepEqual(s, DefaultSpec()) {
			t.Fatalf("Parse(%q) = %+v, want defaults", in, s)
		}
	}
}

func TestParseFullSpec(t *testing.T) {
	in := `
name: tiny-gpt
model: {layers: 6, d_model: 96, heads: 3, context: 64, vocab: 256}
data: {train: data/train.bin, val: data/val.bin}
train: {steps: 500, batch: 32, micro_batches: 8, lr: 3e-4, warmup: 50, seed: 7, eval_every: 0}
parallel:
  replicas: 2
  stages: auto
  schedule: gpipe
  sync: sync
  inner_steps: 1
  outer_lr: 1.0
  outer_momentum: 0
  codec: none
  aggregate: median
  score: on
placement: {strategy: even, min_nodes: 2, max_nodes: 8}
checkpoint: {every: 0}
memory: {recompute: on, zero: 2, offload: on}
`
	s, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		Name:  "tiny-gpt",
		Model: Model{Layers: 6, DModel: 96, Heads: 3, Context: 64, Vocab: 256},
		Data:  Data{Train: "data/train.bin", Val: "data/val.bin"},
		Train: Train{Steps: 500, Batch: 32, MicroBatches: Fixed(8), LR: 3e-4, Warmup: 50, Seed: 7},
		Parallel: Parallel{Replicas: Fixed(2), Stages: Auto(), Schedule: ScheduleGPipe, Sync: SyncEveryStep,
			InnerSteps: 1, OuterLR: Pinned(1), OuterMomentum: Pinned(0), Codec: CodecNone, Fragments: 1, OverlapSteps: 1, Aggregate: AggregateMedian, Score: ScoreOn,
			Audit: AutoValue()},
		Placement:  Placement{Strategy: StrategyEven, MinNodes: 2, MaxNodes: 8},
		Checkpoint: Checkpoint{Every: 0, Keep: 3},
		Memory:     Memory{Recompute: RecomputeOn, Zero: 2, Offload: OffloadOn},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
}

// A train/val pair replaces the builtin source; naming all three is an error.
func TestParseBinPair(t *testing.T) {
	s, err := Parse([]byte("data: {train: a.bin, val: b.bin}"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Data != (Data{Train: "a.bin", Val: "b.bin"}) {
		t.Fatalf("data = %+v", s.Data)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	s := DefaultSpec()
	s.Parallel.Stages = Fixed(3)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"replicas":"auto"`) || !strings.Contains(string(b), `"stages":3`) {
		t.Fatalf("json = %s", b)
	}
	got, err := Parse(b) // JSON is YAML: the API accepts either
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: got %+v want %+v", got, s)
	}
	var viaJSON Spec
	if err := json.Unmarshal(b, &viaJSON); err != nil || !reflect.DeepEqual(viaJSON, s) {
		t.Fatalf("json.Unmarshal: %v %+v", err, viaJSON)
	}
}

// TestMicroBatchesAutoByDefault: the planner picks the micro-batch count unless the spec
// pins one; a spec stored before "auto" existed (an integer in JSON) still decodes.
func TestMicroBatchesAutoByDefault(t *testing.T) {
	if !DefaultSpec().Train.MicroBatches.IsAuto {
		t.Fatal("train.micro_batches defaults to a fixed count")
	}
	for in, want := range map[string]AutoInt{"train: {micro_batches: auto}": Auto(), "train: {micro_batches: 8}": Fixed(8)} {
		s, err := Parse([]byte(in))
		if err != nil || s.Train.MicroBatches != want {
			t.Fatalf("Parse(%q): micro_batches %v, %v; want %v", in, s.Train.MicroBatches, err, want)
		}
	}
	var tr Train
	if err := json.Unmarshal([]byte(`{"batch":16,"micro_batches":4}`), &tr); err != nil || tr.MicroBatches != Fixed(4) {
		t.Fatalf("stored integer: %v, %v", tr.MicroBatches, err)
	}
}

func TestBadSpecs(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // substrings that must all appear in the error
	}{
		{"inner steps zero", "parallel: {inner_steps: 0}", []string{"parallel.inner_steps: must be ≥ 1, got 0"}},
		{"fragments zero", "parallel: {sync: streaming, fragments: 0}", []string{"parallel.fragments: must be ≥ 1, got 0"}},
		{"fragments beyond layers", "model: {layers: 2}\nparallel: {sync: streaming, fragments: 5}", []string{"parallel.fragments: must be ≤ model.layers + 2 (4: embedding, blocks, head), got 5"}},
		{"fragments beyond inner steps", "parallel: {sync: streaming, inner_steps: 2, fragments: 3}", []string{"parallel.fragments: must be ≤ parallel.inner_steps (2)"}},
		{"fragments negative under diloco", "parallel: {fragments: -1}", []string{"parallel.fragments: must be ≥ 0, got -1"}},
		{"overlap beyond inner steps", "parallel: {sync: streaming, inner_steps: 4, overlap_steps: 4}", []string{"parallel.overlap_steps: must be ≥ 0 and < parallel.inner_steps (4), got 4"}},
		{"unknown top field", "modle: {layers: 2}", []string{"modle: unknown field", "known fields: name, model"}},
		{"unknown nested field", "model: {layer: 2}", []string{"model.layer: unknown field (line 1)"}},
		{"duplicate field", "model:\n  layers: 2\n  layers: 3\n", []string{"model.layers: duplicate field (line 3)"}},
		{"wrong type", "model: {layers: four}", []string{`model.layers: must be an integer, got "four"`}},
		{"section not mapping", "train: 5", []string{"train: must be a mapping"}},
		{"empty value", "train: {steps: }", []string{"train.steps: has no value"}},
		{"layers zero", "model: {layers: 0}", []string{"model.layers: must be ≥ 1, got 0"}},
		{"heads not dividing", "model: {d_model: 130, heads: 4}", []string{"model.d_model: must be divisible by model.heads (4), got 130"}},
		{"vocab too large", "model: {vocab: 70000}", []string{"model.vocab: must be ≤ 65536"}},
		{"unknown builtin", "data: {source: builtin:wiki}", []string{`data.source: unknown builtin corpus "builtin:wiki"`}},
		{"source and pair", "data: {source: builtin:gostd, train: a.bin, val: b.bin}", []string{"data: set either data.source or data.train"}},
		{"pair missing val", `data: {train: a.bin}`, []string{"data.val: must be set when data.train is set"}},
		{"pair not bin", `data: {train: a.txt, val: b.bin}`, []string{`data.train: must be a .bin file`}},
		{"no data", `data: {source: ""}`, []string{"data.source: must be"}},
		{"tokenizer on gostd", "data: {tokenizer: /t/tokenizer.json}", []string{"data.tokenizer: encodes text"}},
		{"shard tokens without tokenizer", "data: {source: /c.txt, shard_tokens: 4096}", []string{"data.shard_tokens: shards the text data.tokenizer encodes"}},
		{"shard tokens too few", "data: {source: /c.txt, tokenizer: /t.json, shard_tokens: 10}", []string{"data.shard_tokens: must be 0 (one dataset blob) or 1024…"}},
		{"local is a path", "data: {local: /etc/passwd}", []string{"data.local: must name a local dataset"}},
		{"local with source", "data: {local: web, source: /x.txt}", []string{"data.source: must be empty with data.local"}},
		{"local with a pair", "data: {local: web, train: a.bin, val: b.bin}", []string{"data.train: must be empty with data.local", "data.val: must be empty with data.local"}},
		{"local with tokenizer", "data: {local: web, tokenizer: /t.json}", []string{"data.tokenizer: must be empty with data.local"}},
		{"local across stages", "data: {local: web}\nparallel: {stages: 2}", []string{"parallel.stages: must be 1 or \"auto\" with data.local"}},
		{"local scored", "data: {local: web}\nparallel: {score: \"on\"}", []string{"parallel.score: on needs a held-out batch every replica shares"}},
		{"audit negative", "parallel: {audit: -1, codec: none}", []string{`parallel.audit: must be "auto" or ≥ 0 and ≤ 64`}},
		{"audit huge", "parallel: {audit: 65, codec: none}", []string{`parallel.audit: must be "auto" or ≥ 0 and ≤ 64`}},
		{"audit not a number", "parallel: {audit: .nan, codec: none}", []string{`parallel.audit: must be "auto" or a number`}},
		{"audit infinite", "parallel: {audit: .inf, codec: none}", []string{`parallel.audit: must be "auto" or a number`}},
		{"audit a word", "parallel: {audit: always}", []string{`parallel.audit: must be "auto" or a number`}},
		{"audit with topk", "parallel: {audit: 1, codec: topk}", []string{"parallel.audit: needs parallel.codec none, fp16 or int8"}},
		{"audit streaming", "parallel: {audit: 1, codec: none, sync: streaming}", []string{"parallel.audit: needs parallel.sync diloco or sync"}},
		{"audit zero", "parallel: {audit: 1, codec: none, sync: sync}\nmemory: {zero: 1}", []string{"parallel.audit: needs memory.zero 0"}},
		{"audit local", "data: {local: web}\nparallel: {audit: 1, codec: none}", []string{"parallel.audit: needs the job's own dataset"}},
		{"tokenizer on bins", "data: {train: a.bin, val: b.bin, tokenizer: /t.json}", []string{"data.tokenizer: encodes text"}},
		{"steps negative", "train: {steps: -1}", []string{"train.steps: must be ≥ 1, got -1"}},
		{"micro batches not dividing", "train: {batch: 10, micro_batches: 4}", []string{"train.micro_batches: must divide train.batch (10), got 4"}},
		{"zero out of range", "parallel: {sync: sync, codec: none}\nmemory: {zero: 3}", []string{"memory.zero: must be 0, 1 or 2, got 3"}},
		{"zero with diloco", "parallel: {codec: none}\nmemory: {zero: 1}", []string{`memory.zero: 1 shards what replicas synchronise every step: it needs parallel.sync: sync, got "diloco"`}},
		{"zero with a codec", "parallel: {sync: sync}\nmemory: {zero: 2}", []string{`memory.zero: 2 reduces shards uncompressed: it needs parallel.codec: none, got "int8"`}},
		{"zero not an integer", "memory: {zero: two}", []string{`memory.zero: must be an integer, got "two"`}},
		{"micro batches zero", "train: {micro_batches: 0}", []string{`train.micro_batches: must be "auto" or ≥ 1, got 0`}},
		{"micro batches word", "train: {micro_batches: some}", []string{`train.micro_batches: must be "auto" or an integer, got "some"`}},
		{"bad recompute", "memory: {recompute: sometimes}", []string{`memory.recompute: must be one of auto, on, off, got "sometimes"`}},
		{"bad offload", "memory: {offload: disk}", []string{`memory.offload: must be one of auto, on, off, got "disk"`}},
		{"lr zero", "train: {lr: 0}", []string{"train.lr: must be > 0 and ≤ 1, got 0"}},
		{"lr not a number", "train: {lr: fast}", []string{`train.lr: must be a number, got "fast"`}},
		{"warmup beyond steps", "train: {steps: 10, warmup: 11}", []string{"train.warmup: must be ≤ train.steps (10), got 11"}},
		{"eval negative", "train: {eval_every: -5}", []string{"train.eval_every: must be ≥ 0, got -5"}},
		{"bad precision", "train: {precision: fp8}", []string{`train.precision: must be one of auto, fp32, bf16, got "fp8"`}},
		{"bf16 not yet", "train: {precision: bf16}", []string{"train.precision: bf16 is not implemented yet: every backend trains in fp32"}},
		{"replicas zero", "parallel: {replicas: 0}", []string{`parallel.replicas: must be "auto" or ≥ 1, got 0`}},
		{"replicas word", "parallel: {replicas: many}", []string{`parallel.replicas: must be "auto" or an integer, got "many"`}},
		{"stages too many", "model: {layers: 2}\nparallel: {stages: 5}", []string{"parallel.stages: must be ≤ model.layers + 2 (4"}},
		{"bad schedule", "parallel: {schedule: zb}", []string{`parallel.schedule: must be one of 1f1b, gpipe, got "zb"`}},
		{"bad sync", "parallel: {sync: async}", []string{`parallel.sync: must be one of diloco, sync, streaming, got "async"`}},
		{"bad codec", "parallel: {codec: int4}", []string{`parallel.codec: must be one of none, fp16, int8, topk, got "int4"`}},
		{"bad aggregate", "parallel: {aggregate: krum}", []string{`parallel.aggregate: must be one of mean, trimmed, median, centered_clip, got "krum"`}},
		{"bad score", "parallel: {score: maybe}", []string{`parallel.score: must be one of auto, on, off, got "maybe"`}},
		{"outer lr negative", "parallel: {outer_lr: -1}", []string{`parallel.outer_lr: must be "auto" or > 0 and ≤ 10, got -1`}},
		{"outer lr word", "parallel: {outer_lr: fast}", []string{`parallel.outer_lr: must be "auto" or a number, got "fast"`}},
		{"outer lr infinite", "parallel: {outer_lr: .inf}", []string{`parallel.outer_lr: must be "auto" or a number, got ".inf"`}},
		{"momentum one", "parallel: {outer_momentum: 1}", []string{`parallel.outer_momentum: must be "auto" or ≥ 0 and < 1, got 1`}},
		{"momentum list", "parallel: {outer_momentum: [0.9]}", []string{`parallel.outer_momentum: must be "auto" or a number, got a sequence`}},
		{"bad strategy", "placement: {strategy: greedy}", []string{`placement.strategy: must be one of auto, sky, even, got "greedy"`}},
		{"min nodes zero", "placement: {min_nodes: 0}", []string{"placement.min_nodes: must be ≥ 1, got 0"}},
		{"max below min", "placement: {min_nodes: 3, max_nodes: 2}", []string{"placement.max_nodes: must be 0 (no cap) or ≥ placement.min_nodes (3), got 2"}},
		{"max below replicas×stages", "parallel: {replicas: 2, stages: 3}\nplacement: {max_nodes: 4}", []string{"placement.max_nodes: is 4 but parallel.replicas × parallel.stages needs 6"}},
		{"checkpoint negative", "checkpoint: {every: -1}", []string{"checkpoint.every: must be ≥ 0, got -1"}},
		{"bad name", "name: \"has space\"", []string{`name: must be 1–64 letters`}},
		{"not a mapping", "- a\n- b\n", []string{"job spec must be a YAML mapping"}},
		{"not yaml", "model: {layers: [", []string{"job spec is not valid YAML"}},
		{"two documents", "name: a\n---\nname: b\n", []string{"single YAML document"}},
		{"several at once", "model: {layers: 0, heads: 0}\ntrain: {steps: 0}", []string{"model.layers:", "model.heads:", "train.steps:"}},
		{"oversized", "name: x\n#" + strings.Repeat("x", MaxSpecBytes), []string{"more than the"}},
	}
	if len(cases) < 15 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse accepted %q", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestDefaultSpecValid(t *testing.T) {
	if err := DefaultSpec().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBlobIsSetByTheNodeOnly(t *testing.T) {
	for _, doc := range []string{"data:\n  blob: abc\n", `{"data": {"blob": "abc"}}`, "data:\n  \"-\": x\n"} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%q: got %v, want an unknown-field error", doc, err)
		}
		if err != nil && strings.Contains(err.Error(), "known fields: source, train, val, -") {
			t.Errorf("%q: the error lists the hidden field: %v", doc, err)
		}
	}
	s := DefaultSpec()
	s.Data.Blob = strings.Repeat("ab", 32)
	if err := s.Validate(); err != nil {
		t.Errorf("a spec with a blob ID: %v", err)
	}
	s.Data.Blob = "not-hex"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "data.blob") {
		t.Errorf("a malformed blob ID: got %v, want a data.blob error", err)
	}
}

func TestTokenizerVocab(t *testing.T) {
	for in, want := range map[string]int{
		"data: {source: /d, tokenizer: /t.json}":                               0, // the tokenizer's, read by the submitting node
		"data: {source: /d, tokenizer: /t.json}\nmodel: {vocab: 8192}":         8192,
		"data: {source: /d, tokenizer: /t.json}\nmodel: {preset: smollm-135m}": 0,
		"data: {source: /d}": 256,
		"data: {source: /d.jsonl, text_field: body, tokenizer: /t.json}\nname: x": 0,
	} {
		s, err := Parse([]byte(in))
		if err != nil || s.Model.Vocab != want {
			t.Errorf("Parse(%q): vocab %d, %v; want %d", in, s.Model.Vocab, err, want)
		}
	}
}

// TestParseLocal: data.local replaces the default corpus (no data.source is left behind) and
// round-trips through JSON.
func TestParseLocal(t *testing.T) {
	s, err := Parse([]byte("data: {local: clinic-a}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Data != (Data{Local: "clinic-a"}) {
		t.Fatalf("data = %+v, want only local", s.Data)
	}
	b, _ := json.Marshal(s)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || back.Data != s.Data || back.Validate() != nil {
		t.Fatalf("round trip: %+v, %v", back.Data, err)
	}
}

// TestDocumentParsesBack: what a client sends a node (Spec.Document) parses back to the spec
// the client parsed, for every field a document holds set to its zero where the default is
// not zero, and for specs a user writes. The stored JSON leaves zeros out and Parse reads
// a field left out as its default: before Document, `meshnode submit` of parallel.audit: 0
// submitted "auto" (the testnet's unaudited colluders scenario ran audited), and
// parallel.overlap_steps: 0 became 1.
func TestDocumentParsesBack(t *testing.T) {
	specs := map[string]Spec{}
	for _, src := range []string{
		"",
		"parallel: {audit: 0, sync: streaming, fragments: 2, inner_steps: 8, overlap_steps: 0}",
		"model: {preset: smollm-135m, tied: false, layers: 2}",
		"data: {train: a.bin, val: b.bin}",
		"data: {source: corpus.txt, tokenizer: tok.json}",
		"train: {lora: {rank: 4}}",
	} {
		s, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		specs[src] = s
	}
	// Every leaf whose default is not zero, set to zero on the default spec (valid or not:
	// the document must still carry it).
	var walk func(path []int, typ reflect.Type, name string)
	walk = func(path []int, typ reflect.Type, name string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "" || tag == "-" || f.Tag.Get("yaml") == "-" {
				continue
			}
			p := append(slices.Clone(path), i)
			if f.Type.Kind() == reflect.Struct && !isLeaf(f.Type) {
				walk(p, f.Type, name+tag+".")
				continue
			}
			s := DefaultSpec()
			fv := reflect.ValueOf(&s).Elem().FieldByIndex(p)
			if fv.IsZero() {
				continue
			}
			fv.SetZero()
			specs[name+tag+": zero"] = s
		}
	}
	walk(nil, reflect.TypeFor[Spec](), "")
	if _, ok := specs["parallel.audit: zero"]; !ok {
		t.Fatal("the walk found no parallel.audit to zero")
	}
	for name, s := range specs {
		b, err := s.Document()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, _ := Parse(b) // a zeroed field may be invalid: what decodes must still be s
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%s: the document\n%s\nparses to %+v, want %+v", name, b, got, s)
		}
	}
	// What Parse accepted is valid again from its document.
	for _, src := range []string{"parallel: {audit: 0}", "parallel: {sync: streaming, fragments: 2, inner_steps: 8, overlap_steps: 0}"} {
		s, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.Document()
		if got, err := Parse(b); err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("%s: its document %s parses to %+v (%v)", src, b, got, err)
		}
	}
}

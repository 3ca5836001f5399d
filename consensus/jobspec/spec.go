package jobspec

// Spec is one training job as a user writes it. DefaultSpec gives every default; Parse
// starts from it, so a field absent from the YAML keeps its default.
type Spec struct {
	// Name is a human label, not an identity (the leader assigns ids). Default "job".
	Name string `json:"name" yaml:"name"`
	// Model is the GPT to train.
	Model Model `json:"model" yaml:"model"`
	// Data is the training corpus.
	Data Data `json:"data" yaml:"data"`
	// Train holds the optimiser and loop settings.
	Train Train `json:"train" yaml:"train"`
	// Parallel says how the job is cut into replicas and stages and how replicas sync.
	Parallel Parallel `json:"parallel" yaml:"parallel"`
	// Placement constrains which nodes the balancer may use.
	Placement Placement `json:"placement" yaml:"placement"`
	// Checkpoint says how often state is saved.
	Checkpoint Checkpoint `json:"checkpoint" yaml:"checkpoint"`
	// Memory says how the job trades compute for memory. Omitted from JSON when zero, so
	// that a job stored before it existed encodes as it was stored.
	Memory Memory `json:"memory,omitzero" yaml:"memory"`
}

// Model is the shape of the GPT. It is the one definition of the model's shape: model.Config
// is declared as this type, so its fields, their wire names and DefaultModel are the
// model's too. The JSON names are part of the jobs stored in the control plane: keep them.
type Model struct {
	// Layers is the number of transformer blocks (≥ 1). Default 4.
	Layers int `json:"layers" yaml:"layers"`
	// DModel is the embedding width (≥ 1, divisible by Heads). Default 128.
	DModel int `json:"d_model" yaml:"d_model"`
	// Heads is the number of attention heads (≥ 1). Default 4.
	Heads int `json:"heads" yaml:"heads"`
	// Context is the sequence length (≥ 1). Default 128, or with Init its config.json's
	// (0 until the submitting node has read it; a Llama's may be set shorter).
	Context int `json:"context" yaml:"context"`
	// Vocab is the vocabulary size (1…65536). Default 256 (bytes), or, with data.tokenizer,
	// the tokenizer's: 0 until the submitting node has read it.
	Vocab int `json:"vocab" yaml:"vocab"`

	// The fields below are omitted from JSON when zero, so a job stored before they
	// existed encodes as it was stored; zero is always today's GPT. docs/models.md.

	// Family is the architecture: "gpt" (the default, also ""), "gpt2" or "llama".
	Family Family `json:"family,omitempty" yaml:"family"`
	// Preset names the public shape the other fields started from (PresetNames); the
	// fields hold the resolved shape, so the preset is a label once the spec is parsed.
	// Empty: none.
	Preset string `json:"preset,omitempty" yaml:"preset"`
	// KVHeads is the number of key/value heads of grouped-query attention (llama only;
	// must divide Heads). 0 means Heads (plain multi-head attention).
	KVHeads int `json:"kv_heads,omitempty" yaml:"kv_heads"`
	// Intermediate is the MLP's hidden width. 0 means 4·DModel.
	Intermediate int `json:"intermediate,omitempty" yaml:"intermediate"`
	// RopeTheta is the base of the rotary position embeddings (llama only). 0 means 10000.
	RopeTheta float64 `json:"rope_theta,omitempty" yaml:"rope_theta"`
	// Tied says that the output head is the token embedding (llama; gpt2 always ties, gpt
	// never does). Default false.
	Tied bool `json:"tied,omitempty" yaml:"tied"`
	// NormEps is the epsilon of the normalisations (gpt2's LayerNorm, llama's RMSNorm).
	// 0 means 1e-5; the gpt family's LayerNorm always uses 1e-5.
	NormEps float64 `json:"norm_eps,omitempty" yaml:"norm_eps"`
	// Init is a Hugging Face model directory on the submitting node (config.json, the
	// weights, tokenizer.json) the job starts from instead of a random initialisation.
	// The submitting node replaces the fields above with its config.json's, encodes the
	// corpus with its tokenizer and publishes its weights as InitBlob. Empty: none.
	Init string `json:"init,omitempty" yaml:"init"`
	// InitBlob is the ID of the blob of initial weights (a safetensors file of every
	// parameter under meshnode's names) the submitting node packed from Init, which every
	// node of the job fetches. The node sets it at submission; a spec's YAML cannot.
	InitBlob string `json:"init_blob,omitempty" yaml:"-"`
}

// Data names the corpus: either Source (a builtin corpus or a path on the submitting node),
// a Train/Val pair of nanoGPT-style uint16 .bin token files, or Local (a dataset each
// training node holds itself).
type Data struct {
	// Source is "builtin:gostd" (the default: the Go standard library's source) or a path
	// to a text file or directory on the submitting node. Empty when Train is set.
	Source string `json:"source,omitempty" yaml:"source"`
	// Train is a .bin token file for training; Val must be set with it.
	Train string `json:"train,omitempty" yaml:"train"`
	// Val is a .bin token file for evaluation; Train must be set with it.
	Val string `json:"val,omitempty" yaml:"val"`
	// Tokenizer is a tokenizer.json on the submitting node that encodes the text of Source
	// (a text file, a directory of text files or a .jsonl file). It travels in the dataset
	// blob, so every node and generate use the same one. Empty: text is bytes.
	Tokenizer string `json:"tokenizer,omitempty" yaml:"tokenizer"`
	// TextField is the field of each .jsonl line that holds its text. Empty: "text".
	TextField string `json:"text_field,omitempty" yaml:"text_field"`
	// ShardTokens, with Tokenizer, makes the submitting node encode Source into a sharded
	// corpus of this many tokens per shard (as `meshnode tokenizer shard` does: document k
	// to validation when k mod 20 = 19) and ship it shard by shard, so that each replica
	// fetches only its shards and no total size limit applies. 0: one dataset blob, the
	// last 5% of the tokens for validation.
	ShardTokens int `json:"shard_tokens,omitempty" yaml:"shard_tokens"`
	// Local names a local dataset (federated data): every replica trains and evaluates on
	// the dataset its own node's operator exposed under this name (`meshnode join
	// --local-data NAME=PATH`), and none of it crosses the wire; the planner places
	// replicas only on nodes that announce it, one node per replica. A spec names it,
	// never a path, so a submitter can make a node read only what its operator exposed.
	// Excludes Source, Train, Val and Tokenizer.
	Local string `json:"local,omitempty" yaml:"local"`
	// Blob is the ID of the dataset blob the submitting node packed from the fields above
	// (node.PublishDataset), which every node of the job fetches and trains on. The node
	// sets it at submission; a spec's YAML cannot (it is an unknown field there).
	Blob string `json:"blob,omitempty" yaml:"-"`
	// TrainShards is, when Blob is a sharded dataset (a manifest of shard blobs), how many
	// training shards it lists: the planner assigns them to replicas
	// (model.ReplicaShards) and records the assignment in the plan, and each node fetches
	// only its replica's. The node sets it with Blob; 0: Blob is one packed dataset.
	TrainShards int `json:"train_shards,omitempty" yaml:"-"`
}

// Train holds the training loop's settings. The defaults are `meshnode train`'s recipe
// (parallel.DefaultTrainConfig) except MicroBatches, which the planner chooses.
type Train struct {
	// Steps is the number of optimiser steps (≥ 1). Default 300.
	Steps int `json:"steps" yaml:"steps"`
	// Batch is the global batch in sequences per step per replica (≥ 1). Default 16.
	Batch int `json:"batch" yaml:"batch"`
	// MicroBatches splits Batch for the pipeline: "auto" (the default: the balancer picks
	// the count that is fastest within the nodes' memory, and picks again when the mesh
	// changes) or a count ≥ 1 that divides Batch. The count never changes the math: every
	// micro-batch's gradient is weighted by its share of the batch.
	MicroBatches AutoInt `json:"micro_batches" yaml:"micro_batches"`
	// LR is the peak AdamW learning rate (> 0, ≤ 1). Default 0.002.
	LR float64 `json:"lr" yaml:"lr"`
	// Warmup is the number of linear warm-up steps (0 ≤ warmup ≤ steps). Default 30.
	Warmup int `json:"warmup" yaml:"warmup"`
	// Seed fixes initialisation and data order. Default 1.
	Seed uint64 `json:"seed" yaml:"seed"`
	// EvalEvery is the number of steps between evaluations; 0 disables them. Default 100.
	EvalEvery int `json:"eval_every" yaml:"eval_every"`
	// Precision is "auto" (the default, "" too: fp32 today), "fp32" or "bf16" (refused
	// until a backend trains in it; docs/gpu.md).
	Precision Precision `json:"precision,omitempty" yaml:"precision,omitempty"`
	// LoRA, when set, fine-tunes low-rank adapters on a frozen base instead of every
	// weight (docs/lora.md). Nil (the default) trains every weight; omitted from JSON then.
	LoRA *LoRA `json:"lora,omitempty" yaml:"lora"`
}

// BuiltinGoStd is the default corpus: the Go standard library's source.
const BuiltinGoStd = "builtin:gostd"

// Parallel says how the job is parallelised.
type Parallel struct {
	// Replicas is "auto" (the balancer decides; the default) or a count ≥ 1.
	Replicas AutoInt `json:"replicas" yaml:"replicas"`
	// Stages is "auto" (the default) or a count from 1 to model.layers + 2.
	Stages AutoInt `json:"stages" yaml:"stages"`
	// Schedule is the pipeline schedule: "1f1b" (default) or "gpipe".
	Schedule Schedule `json:"schedule" yaml:"schedule"`
	// Sync is how replicas agree: "diloco" (default; local steps + outer step), "streaming"
	// (Streaming DiLoCo: the outer step per fragment of layers, staggered and overlapped)
	// or "sync" (all-reduce every step).
	Sync Sync `json:"sync" yaml:"sync"`
	// InnerSteps is the number of local steps between DiLoCo syncs (≥ 1). Default 50.
	InnerSteps int `json:"inner_steps" yaml:"inner_steps"`
	// OuterLR is the outer Nesterov learning rate: "auto" (the default: AutoOuter's choice
	// for the job's number of outer steps) or a number > 0.
	OuterLR AutoFloat `json:"outer_lr" yaml:"outer_lr"`
	// OuterMomentum is the outer Nesterov momentum: "auto" (the default: AutoOuter's
	// choice) or a number with 0 ≤ m < 1.
	OuterMomentum AutoFloat `json:"outer_momentum" yaml:"outer_momentum"`
	// Codec compresses pseudo-gradients: "none", "fp16", "int8" (default) or "topk".
	Codec Codec `json:"codec" yaml:"codec"`
	// Fragments is streaming's number of layer fragments, each synchronised on its own
	// step of the outer period (fragment f at the steps ≡ ⌊f·inner_steps/fragments⌋ mod
	// inner_steps): 1 ≤ fragments ≤ model.layers + 2 and ≤ inner_steps. Default 1.
	Fragments int `json:"fragments,omitzero" yaml:"fragments"`
	// OverlapSteps is streaming's τ: the inner steps a fragment's all-reduce runs beside
	// before its update is applied (0 ≤ τ < inner_steps). Default 1.
	OverlapSteps int `json:"overlap_steps,omitzero" yaml:"overlap_steps"`
	// Aggregate is how a replica combines the replicas' contributions (gradients,
	// pseudo-gradients): "mean" (default), "trimmed" or "median". Every rule first drops a
	// contribution that is not finite or whose norm is far above this replica's own.
	// Omitted from JSON when empty: a job stored before it existed means "mean".
	Aggregate Aggregate `json:"aggregate,omitzero" yaml:"aggregate"`
	// Score is whether replicas score each contribution on a held-out batch and drop
	// those that do not lower its loss: "auto" (default: DiLoCo's outer steps), "on"
	// (every synchronisation, every-step sync and ZeRO too) or "off". It applies where a
	// replica is one stage. Omitted from JSON when empty: a job stored before it existed
	// means "auto".
	Score Score `json:"score,omitzero" yaml:"score"`
	// Audit is how many members of each checked gather are drawn, on average, to have
	// their contribution recomputed by every other member, which drops and bans one whose
	// contribution is not its own work (a replay of what it saw); every contribution the
	// held-out score drops is recomputed too. "auto" (the default) is 1 for a DiLoCo job
	// that can be audited, where its plan's replicas are each one stage whose node can
	// also hold the audit worker, and 0 otherwise (ResolvedAudit); 0 audits none. Each
	// audit costs every other member one replica's work of the gather (DiLoCo:
	// inner_steps steps; sync: one step's passes); DiLoCo's inner AdamW then starts every
	// outer step from zero moments, and fp16 and int8 send without error feedback. A
	// number above 0 needs sync diloco or sync, a codec other than topk, memory.zero 0, no
	// data.local and an unsharded dataset, and applies where every replica is one stage.
	// Omitted from JSON when 0: a job stored before the field existed reads as no audit.
	Audit AutoFloat `json:"audit,omitzero" yaml:"audit"`
}

// Placement constrains where the job runs.
type Placement struct {
	// Strategy is the partitioner: "auto" (default), "sky" or "even".
	Strategy Strategy `json:"strategy" yaml:"strategy"`
	// MinNodes is the number of live nodes the job waits for (≥ 1). Default 1.
	MinNodes int `json:"min_nodes" yaml:"min_nodes"`
	// MaxNodes caps the nodes used; 0 (the default) means no cap.
	MaxNodes int `json:"max_nodes" yaml:"max_nodes"`
}

// Checkpoint says how often the job saves its state.
type Checkpoint struct {
	// Every is the number of steps between checkpoints; 0 disables them. Default 100.
	Every int `json:"every" yaml:"every"`
	// Keep is how many checkpoints each node keeps on disk; older ones are deleted. ≥ 1.
	// Default 3.
	Keep int `json:"keep" yaml:"keep"`
}

// DefaultModel is the default GPT: 4 layers, d_model 128, 4 heads, context 128, byte
// vocabulary.
func DefaultModel() Model {
	return Model{Layers: 4, DModel: 128, Heads: 4, Context: 128, Vocab: 256}
}

// DefaultSpec is the spec of the default job: every field at its default.
func DefaultSpec() Spec {
	return Spec{
		Name:  "job",
		Model: DefaultModel(),
		Data:  Data{Source: BuiltinGoStd},
		Train: Train{Steps: 300, Batch: 16, MicroBatches: Auto(), LR: 2e-3, Warmup: 30, Seed: 1, EvalEvery: 100},
		Parallel: Parallel{
			Replicas: Auto(), Stages: Auto(),
			Schedule: Schedule1F1B, Sync: SyncDiLoCo,
			InnerSteps: 50, OuterLR: AutoValue(), OuterMomentum: AutoValue(), Codec: CodecInt8,
			Fragments: 1, OverlapSteps: 1, Aggregate: AggregateMean, Score: ScoreAuto,
			Audit: AutoValue(),
		},
		Placement:  Placement{Strategy: StrategyAuto, MinNodes: 1},
		Checkpoint: Checkpoint{Every: 100, Keep: 3},
		Memory:     Memory{Recompute: RecomputeAuto, Offload: OffloadAuto},
	}
}

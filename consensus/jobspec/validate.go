package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// blobIDPattern is a mesh blob ID: the hex SHA-256 of the blob's manifest.
var blobIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate reports every field that makes the spec unrunnable, each error naming the field's
// dotted path and why: "parallel.inner_steps: must be ≥ 1, got 0". It returns nil for a
// valid spec. Validate does not touch the file system: whether data paths exist is checked
// by the submitting side, which is where they live.
func (s Spec) Validate() error {
	var v validator
	if !namePattern.MatchString(s.Name) {
		v.addf("name", "must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit, got %q", s.Name)
	}
	s.Model.validate(&v, s.Data.Tokenizer != "")
	s.Data.validate(&v)
	s.Train.validate(&v)
	s.Parallel.validate(&v, s.Model)
	s.Placement.validate(&v, s.Parallel)
	v.between("checkpoint.every", s.Checkpoint.Every, 0, MaxSteps)
	v.between("checkpoint.keep", s.Checkpoint.Keep, 1, MaxCheckpointsKept)
	s.Memory.validate(&v)
	s.validateTied(&v)
	s.validateZero(&v)
	s.validateMemory(&v)
	s.validateLoRA(&v)
	s.validateScore(&v)
	s.validateAudit(&v)
	if st := s.Parallel.Stages; s.Data.Local != "" && !st.IsAuto && st.N != 1 {
		v.addf("parallel.stages", "must be 1 or \"auto\" with data.local (a replica trains on one node's own data), got %d", st.N)
	}
	if err := v.err(); err != nil {
		return err
	}
	if b, err := json.Marshal(s); err != nil || len(b) > MaxEncodedSpecBytes {
		v.addf("spec", "must encode to at most %d bytes of JSON, got %d (%v)", MaxEncodedSpecBytes, len(b), err)
	}
	return v.err()
}

// validate checks the model section; fromTokenizer allows Vocab 0 (the tokenizer's, set by
// the submitting node).
func (m Model) validate(v *validator, fromTokenizer bool) {
	v.between("model.layers", m.Layers, 1, MaxLayers)
	v.between("model.d_model", m.DModel, 1, MaxDModel)
	v.between("model.heads", m.Heads, 1, MaxHeads)
	if m.Context != 0 || m.Init == "" { // 0 with model.init: its config.json's
		v.between("model.context", m.Context, 1, MaxContext)
	}
	if m.Vocab > MaxVocab {
		v.addf("model.vocab", "must be ≤ %d (tokens are uint16), got %d", MaxVocab, m.Vocab)
	} else if m.Vocab != 0 || !fromTokenizer {
		v.min("model.vocab", m.Vocab, 1)
	}
	if m.DModel >= 1 && m.Heads >= 1 && m.DModel%m.Heads != 0 {
		v.addf("model.d_model", "must be divisible by model.heads (%d), got %d", m.Heads, m.DModel)
	}
	m.validateFamily(v)
	if len(m.Init) > MaxDataPathBytes {
		v.addf("model.init", "must be a path of at most %d bytes, got %d bytes", MaxDataPathBytes, len(m.Init))
	}
	if m.InitBlob != "" && !blobIDPattern.MatchString(m.InitBlob) {
		v.addf("model.init_blob", "must be a blob ID (64 lowercase hex digits), got %q", m.InitBlob)
	}
}

func (d Data) validate(v *validator) {
	for _, f := range []struct{ name, path string }{{"data.source", d.Source}, {"data.train", d.Train}, {"data.val", d.Val}, {"data.tokenizer", d.Tokenizer}} {
		if len(f.path) > MaxDataPathBytes {
			v.addf(f.name, "must be a path of at most %d bytes, got %d bytes", MaxDataPathBytes, len(f.path))
		}
	}
	if d.Blob != "" && !blobIDPattern.MatchString(d.Blob) {
		v.addf("data.blob", "must be a dataset blob ID (64 lowercase hex digits), got %q", d.Blob)
	}
	switch {
	case d.ShardTokens != 0 && (d.ShardTokens < MinShardTokens || d.ShardTokens > MaxShardTokens):
		v.addf("data.shard_tokens", "must be 0 (one dataset blob) or %d…%d tokens per shard, got %d", MinShardTokens, MaxShardTokens, d.ShardTokens)
	case d.ShardTokens != 0 && d.Tokenizer == "":
		v.addf("data.shard_tokens", "shards the text data.tokenizer encodes: set data.tokenizer (a sharded corpus directory as data.source is already sharded)")
	}
	if d.TrainShards < 0 || d.TrainShards > MaxTrainShards || d.TrainShards > 0 && d.Blob == "" {
		v.addf("data.train_shards", "must be 0…%d, and set only with data.blob, got %d", MaxTrainShards, d.TrainShards)
	}
	if d.Local != "" {
		d.validateLocal(v)
		return
	}
	switch {
	case d.Source != "" && (d.Train != "" || d.Val != ""):
		v.addf("data", "set either data.source or data.train and data.val, not both")
	case d.Source == "" && d.Train == "" && d.Val == "":
		v.addf("data.source", "must be %q, a path, or data.train/data.val must be set", BuiltinGoStd)
	case strings.HasPrefix(d.Source, "builtin:") && d.Source != BuiltinGoStd:
		v.addf("data.source", "unknown builtin corpus %q (known: %s)", d.Source, BuiltinGoStd)
	case d.Source == "":
		binFile(v, "data.train", d.Train)
		binFile(v, "data.val", d.Val)
	}
	switch {
	case d.Tokenizer != "" && (d.Source == "" || d.Source == BuiltinGoStd):
		v.addf("data.tokenizer", "encodes text: set data.source to a text file, a directory of text files or a .jsonl file (%s and .bin tokens are not text to encode)", BuiltinGoStd)
	case len(d.TextField) > MaxDataPathBytes:
		v.addf("data.text_field", "must be at most %d bytes, got %d", MaxDataPathBytes, len(d.TextField))
	}
}

// LocalDataNamePattern is what a local dataset's name (data.local, --local-data NAME=PATH)
// looks like: a label, never a path.
var LocalDataNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

func (d Data) validateLocal(v *validator) {
	if !LocalDataNamePattern.MatchString(d.Local) {
		v.addf("data.local", "must name a local dataset a node's operator exposed (--local-data NAME=PATH; a name of 1-64 lowercase letters, digits, '.', '_' or '-'), got %q", truncate(d.Local, 80))
	}
	for _, f := range []struct{ name, val string }{{"data.source", d.Source}, {"data.train", d.Train}, {"data.val", d.Val}, {"data.tokenizer", d.Tokenizer}, {"data.text_field", d.TextField}, {"data.blob", d.Blob}} {
		if f.val != "" {
			v.addf(f.name, "must be empty with data.local (each node trains on its own local dataset), got %q", truncate(f.val, 80))
		}
	}
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func binFile(v *validator, field, path string) {
	switch {
	case path == "":
		v.addf(field, "must be set when %s is set", map[string]string{"data.train": "data.val", "data.val": "data.train"}[field])
	case !strings.HasSuffix(path, ".bin"):
		v.addf(field, "must be a .bin file of uint16 tokens, got %q", path)
	}
}

func (t Train) validate(v *validator) {
	v.between("train.steps", t.Steps, 1, MaxSteps)
	v.between("train.batch", t.Batch, 1, MaxBatch)
	switch m := t.MicroBatches; {
	case m.IsAuto:
	case m.N < 1:
		v.addf("train.micro_batches", "must be \"auto\" or ≥ 1, got %d", m.N)
	case m.N > MaxBatch:
		v.addf("train.micro_batches", "must be \"auto\" or ≤ %d, got %d", MaxBatch, m.N)
	case t.Batch >= 1 && t.Batch%m.N != 0:
		v.addf("train.micro_batches", "must divide train.batch (%d), got %d", t.Batch, m.N)
	}
	if !(t.LR > 0 && t.LR <= 1) {
		v.addf("train.lr", "must be > 0 and ≤ 1, got %v", t.LR)
	}
	v.between("train.warmup", t.Warmup, 0, MaxSteps)
	if t.Steps >= 1 && t.Warmup > t.Steps {
		v.addf("train.warmup", "must be ≤ train.steps (%d), got %d", t.Steps, t.Warmup)
	}
	v.between("train.eval_every", t.EvalEvery, 0, MaxSteps)
	v.add(t.Precision.Check("train.precision"))
}

func (p Parallel) validate(v *validator, m Model) {
	switch {
	case p.Replicas.IsAuto:
	case p.Replicas.N < 1:
		v.addf("parallel.replicas", "must be \"auto\" or ≥ 1, got %d", p.Replicas.N)
	case p.Replicas.N > MaxReplicas:
		v.addf("parallel.replicas", "must be \"auto\" or ≤ %d, got %d", MaxReplicas, p.Replicas.N)
	}
	maxStages := min(m.Layers, MaxLayers) + 2 // m.Layers is bounded first: no overflow
	switch {
	case p.Stages.IsAuto:
	case p.Stages.N < 1:
		v.addf("parallel.stages", "must be \"auto\" or ≥ 1, got %d", p.Stages.N)
	case m.Layers >= 1 && p.Stages.N > maxStages:
		v.addf("parallel.stages", "must be ≤ model.layers + 2 (%d: embedding, blocks, head), got %d", maxStages, p.Stages.N)
	}
	v.add(p.Schedule.Check("parallel.schedule"))
	v.add(p.Sync.Check("parallel.sync"))
	v.between("parallel.inner_steps", p.InnerSteps, 1, MaxSteps)
	p.validateStreaming(v, m)
	v.add(p.OuterLR.CheckOuterLR("parallel.outer_lr"))
	v.add(p.OuterMomentum.CheckOuterMomentum("parallel.outer_momentum"))
	v.add(p.Codec.Check("parallel.codec"))
	if p.Aggregate != "" {
		v.add(p.Aggregate.Check("parallel.aggregate"))
	}
	if p.Score != "" {
		v.add(p.Score.Check("parallel.score"))
	}
}

// validateStreaming checks streaming's fields. Other syncs ignore them, and a spec from
// before they existed (JSON without them: zero) stays valid, so only negative values are
// refused there.
func (p Parallel) validateStreaming(v *validator, m Model) {
	if p.Sync != SyncStreaming {
		v.min("parallel.fragments", p.Fragments, 0)
		v.min("parallel.overlap_steps", p.OverlapSteps, 0)
		return
	}
	if err := CheckFragments(p.Fragments, m.Layers, p.InnerSteps, SpecNames); err != nil {
		v.errs = append(v.errs, err)
	}
	if p.OverlapSteps < 0 || (p.InnerSteps >= 1 && p.OverlapSteps >= p.InnerSteps) {
		v.addf("parallel.overlap_steps", "must be ≥ 0 and < parallel.inner_steps (%d), got %d", p.InnerSteps, p.OverlapSteps)
	}
}

func (pl Placement) validate(v *validator, p Parallel) {
	v.add(check("placement.strategy", pl.Strategy, JobStrategies()))
	v.between("placement.min_nodes", pl.MinNodes, 1, MaxNodes)
	v.between("placement.max_nodes", pl.MaxNodes, 0, MaxNodes)
	if pl.MaxNodes > 0 && pl.MaxNodes < pl.MinNodes {
		v.addf("placement.max_nodes", "must be 0 (no cap) or ≥ placement.min_nodes (%d), got %d", pl.MinNodes, pl.MaxNodes)
	}
	// Both counts are bounded before they are multiplied, so the product cannot overflow.
	fixed := !p.Replicas.IsAuto && !p.Stages.IsAuto && inRange(p.Replicas.N, 1, MaxReplicas) && inRange(p.Stages.N, 1, MaxLayers+2)
	if pl.MaxNodes > 0 && fixed && p.Replicas.N*p.Stages.N > pl.MaxNodes {
		v.addf("placement.max_nodes", "is %d but parallel.replicas × parallel.stages needs %d nodes", pl.MaxNodes, p.Replicas.N*p.Stages.N)
	}
}

// validator collects field errors in the order they are found.
type validator struct{ errs []error }

func (v *validator) addf(field, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (v *validator) min(field string, got, lo int) {
	if got < lo {
		v.addf(field, "must be ≥ %d, got %d", lo, got)
	}
}

// between reports got outside [lo, hi]; the message names the bound that was crossed.
func (v *validator) between(field string, got, lo, hi int) {
	switch {
	case got < lo:
		v.addf(field, "must be ≥ %d, got %d", lo, got)
	case got > hi:
		v.addf(field, "must be ≤ %d, got %d", hi, got)
	}
}

func inRange(x, lo, hi int) bool { return x >= lo && x <= hi }

// add records err unless it is nil.
func (v *validator) add(err error) {
	if err != nil {
		v.errs = append(v.errs, err)
	}
}

func (v *validator) err() error { return errors.Join(v.errs...) }

// validateTied refuses what a tied model cannot do yet: the offload store pins the token
// table only with the embedding, not the head's view of it. (Pipeline stages may part the
// embedding from the head: the table crosses between them, docs/models.md.)
func (s Spec) validateTied(v *validator) {
	if !s.Model.TiedHead() {
		return
	}
	if s.Memory.Offload == OffloadOn {
		v.addf("memory.offload", "a tied %s model cannot be offloaded yet (its head shares the embedding's table)", s.Model.FamilyName())
	}
}

// validateLoRA checks train.lora.
func (s Spec) validateLoRA(v *validator) {
	if s.Train.LoRA != nil {
		v.add(s.Train.LoRA.Check("train.lora", s.Model.FamilyName()))
	}
}

package jobspec

import "fmt"

// Names spells, in a rule's error, the settings the rule reads: as the job spec does
// (SpecNames) or as another configuration or a command's flags do. The rules below are
// the one statement of each constraint between job fields: the spec's validation, the
// engine and the CLI call them instead of restating them.
type Names struct {
	Zero, Sync, Codec, Fragments, InnerSteps, Layers string
	// Is joins a setting to a value it needs: ": " in the spec ("parallel.sync: sync"),
	// " " for a flag ("--sync sync").
	Is string
}

// SpecNames are the job spec's field names.
var SpecNames = Names{Zero: "memory.zero", Sync: "parallel.sync", Codec: "parallel.codec",
	Fragments: "parallel.fragments", InnerSteps: "parallel.inner_steps", Layers: "model.layers", Is: ": "}

// CheckZero is the rule of the ZeRO stage: 0, 1 or 2, and sharding only where replicas
// reduce uncompressed gradients every step (sync SyncEveryStep, codec CodecNone).
func CheckZero(zero int, sync Sync, codec Codec, n Names) error {
	switch {
	case zero < 0 || zero > 2:
		return fmt.Errorf("%s: must be 0, 1 or 2, got %d", n.Zero, zero)
	case zero > 0 && sync != SyncEveryStep:
		return fmt.Errorf("%s: %d shards what replicas synchronise every step: it needs %s%s%s, got %q", n.Zero, zero, n.Sync, n.Is, SyncEveryStep, sync)
	case zero > 0 && codec != CodecNone:
		return fmt.Errorf("%s: %d reduces shards uncompressed: it needs %s%s%s, got %q", n.Zero, zero, n.Codec, n.Is, CodecNone, codec)
	}
	return nil
}

// CheckFragments is the rule of streaming's fragments: at least 1, at most the model's
// layers + 2 (embedding, blocks, head; layers 0: not known yet, not checked) and at most
// the inner steps (each fragment syncs on its own step of the outer period; innerSteps 0:
// not checked).
func CheckFragments(fragments, layers, innerSteps int, n Names) error {
	maxFragments := min(layers, MaxLayers) + 2
	switch {
	case fragments < 1:
		return fmt.Errorf("%s: must be ≥ 1, got %d", n.Fragments, fragments)
	case layers >= 1 && fragments > maxFragments:
		return fmt.Errorf("%s: must be ≤ %s + 2 (%d: embedding, blocks, head), got %d", n.Fragments, n.Layers, maxFragments, fragments)
	case innerSteps >= 1 && fragments > innerSteps:
		return fmt.Errorf("%s: must be ≤ %s (%d): each fragment syncs on its own step, got %d", n.Fragments, n.InnerSteps, innerSteps, fragments)
	}
	return nil
}

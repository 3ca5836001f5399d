package jobspec

import "testing"

// TestModelInitLeavesTheContextToConfigJSON: with model.init and no model.context the
// context is 0 (config.json's, read by the submitting node) and the spec is valid; a
// context written beside it is kept (a Llama may train shorter than its
// max_position_embeddings); without model.init 0 is refused as before.
func TestModelInitLeavesTheContextToConfigJSON(t *testing.T) {
	for doc, want := range map[string]int{
		"model: {init: /models/smollm}\n":              0,
		"model: {init: /models/smollm, context: 64}\n": 64,
		"model: {layers: 2}\n":                         128,
	} {
		s, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if s.Model.Context != want {
			t.Errorf("%q: context %d, want %d", doc, s.Model.Context, want)
		}
	}
	if _, err := Parse([]byte("model: {context: 0}\n")); err == nil {
		t.Error("context 0 without model.init was accepted")
	}
	long := make([]byte, MaxDataPathBytes+1)
	for i := range long {
		long[i] = 'a'
	}
	if _, err := Parse([]byte("model: {init: /" + string(long) + "}\n")); err == nil {
		t.Error("a model.init path longer than the bound was accepted")
	}
}

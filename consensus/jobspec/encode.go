package jobspec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// Document is s as a job spec document that Parse reads back to s: what a client sends a
// node after parsing and resolving a user's spec (meshnode submit, the testnet).
//
// s's JSON is the stored form, which leaves out zero values (omitempty, omitzero: a job
// stored before a field existed reads it as zero, its behaviour of then). Parse decodes over
// DefaultSpec, so a field left out reads as its default: where the default is not zero, the
// user's zero would be lost on the way (parallel.audit: 0 would run audited under "auto",
// parallel.overlap_steps: 0 would overlap one step). Document writes those zeros out.
func (s Spec) Document() ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("job spec document: %w", err)
	}
	writeZeros(doc, reflect.ValueOf(s), reflect.ValueOf(DefaultSpec()))
	return json.Marshal(doc)
}

// writeZeros adds to doc, the JSON object of struct v, each field of v that the JSON left
// out while it is zero and def's is not, recursing into sections.
func writeZeros(doc map[string]any, v, def reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || f.Tag.Get("yaml") == "-" || !f.IsExported() {
			continue // not a field a document can hold (Parse leaves it to the node)
		}
		fv, dv := v.Field(i), def.Field(i)
		if section, ok := doc[name].(map[string]any); ok && fv.Kind() == reflect.Struct {
			writeZeros(section, fv, dv)
			continue
		}
		if _, present := doc[name]; present || !fv.IsZero() || dv.IsZero() {
			continue
		}
		if fv.Kind() == reflect.Struct && !isLeaf(fv.Type()) {
			section := map[string]any{} // a whole section left out: its fields one by one
			writeZeros(section, fv, dv)
			if len(section) > 0 {
				doc[name] = section
			}
			continue
		}
		doc[name] = fv.Interface()
	}
}

// isLeaf says a struct type is one value in a document ("auto" or a number), not a section.
func isLeaf(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(unmarshalerType)
}

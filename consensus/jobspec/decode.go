package jobspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxSpecBytes bounds a spec's encoded size; Parse rejects larger input before decoding.
const MaxSpecBytes = 1 << 20

// Parse decodes a YAML (or JSON, which is YAML) job spec over DefaultSpec and validates it.
// Decoding is strict: an unknown or duplicate field, or a value of the wrong type, is an
// error naming the field's dotted path (model.layers). Every problem found is reported,
// joined with errors.Join; the spec is returned even when it is invalid so callers can show
// it. An empty document is the default spec.
func Parse(b []byte) (Spec, error) {
	s := DefaultSpec()
	if len(b) > MaxSpecBytes {
		return s, fmt.Errorf("job spec is %d bytes, more than the %d allowed", len(b), MaxSpecBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return s, s.Validate()
		}
		return s, fmt.Errorf("job spec is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return s, errors.New("job spec must be a single YAML document")
	}
	var errs []error
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	switch {
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
	case root.Kind != yaml.MappingNode:
		return s, fmt.Errorf("job spec must be a YAML mapping of sections (name, model, data, ...), got a %s", kindName(root.Kind))
	default:
		if pairWithoutSource(root) || sectionHasKey(root, "data", "local") && !sectionHasKey(root, "data", "source") {
			s.Data.Source = "" // a train/val pair or a local dataset replaces the default corpus
		}
		if preset := modelPreset(root); preset != "" {
			// The preset's shape replaces the default model; the fields written beside
			// it override it. An unknown name is validation's to report.
			if m, err := PresetModel("model.preset", preset); err == nil {
				s.Model = m
			}
		}
		decodeStruct(root, reflect.ValueOf(&s).Elem(), "", &errs)
		if s.Data.Tokenizer != "" && !sectionHasKey(root, "model", "vocab") {
			s.Model.Vocab = 0 // the tokenizer's, which the submitting node reads
		}
		if s.Model.Init != "" && !sectionHasKey(root, "model", "context") {
			s.Model.Context = 0 // model.init's config.json's, which the submitting node reads
		}
	}
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	return s, s.Validate()
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decodeStruct decodes mapping n into struct v field by field, so that every error can name
// the field's path.
func decodeStruct(n *yaml.Node, v reflect.Value, prefix string, errs *[]error) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		path := prefix + key.Value
		if seen[key.Value] {
			*errs = append(*errs, fmt.Errorf("%s: duplicate field (line %d)", path, key.Line))
			continue
		}
		seen[key.Value] = true
		f, ok := fieldByTag(v, key.Value)
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s: unknown field (line %d); known fields: %s", path, key.Line, strings.Join(tags(v.Type()), ", ")))
			continue
		}
		decodeField(val, f, path, errs)
	}
}

func decodeField(val *yaml.Node, f reflect.Value, path string, errs *[]error) {
	isSection := f.Kind() == reflect.Struct && !f.Addr().Type().Implements(unmarshalerType)
	if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
		if !isSection { // an empty section keeps its defaults
			*errs = append(*errs, fmt.Errorf("%s: has no value (line %d)", path, val.Line))
		}
		return
	}
	if f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct && val.Kind == yaml.MappingNode {
		// An optional section (train.lora): present means set, its fields checked by name.
		if f.IsNil() {
			f.Set(reflect.New(f.Type().Elem()))
		}
		decodeStruct(val, f.Elem(), path+".", errs)
		return
	}
	if isSection {
		if val.Kind != yaml.MappingNode {
			*errs = append(*errs, fmt.Errorf("%s: must be a mapping, got a %s (line %d)", path, kindName(val.Kind), val.Line))
			return
		}
		decodeStruct(val, f, path+".", errs)
		return
	}
	if err := val.Decode(f.Addr().Interface()); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %s (line %d)", path, typeError(err, f, val), val.Line))
	}
}

// typeError turns yaml's "cannot unmarshal !!str `x` into int" into words a user can act on.
func typeError(err error, f reflect.Value, val *yaml.Node) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	want := map[reflect.Kind]string{
		reflect.Int: "an integer", reflect.Int64: "an integer", reflect.Uint64: "a non-negative integer",
		reflect.Float64: "a number", reflect.String: "a string",
	}[f.Kind()]
	if want == "" {
		return strings.Join(te.Errors, "; ")
	}
	if val.Kind != yaml.ScalarNode {
		return fmt.Sprintf("must be %s, got a %s", want, kindName(val.Kind))
	}
	return fmt.Sprintf("must be %s, got %q", want, val.Value)
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n == name && n != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func tags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "-" { // set by the node, not by users
			out = append(out, n)
		}
	}
	return out
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// pairWithoutSource reports whether the spec's data section names data.train or data.val
// but not data.source.
func pairWithoutSource(root *yaml.Node) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "data" || root.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		keys := map[string]bool{}
		data := root.Content[i+1]
		for j := 0; j < len(data.Content); j += 2 {
			keys[data.Content[j].Value] = true
		}
		return (keys["train"] || keys["val"]) && !keys["source"]
	}
	return false
}

// sectionHasKey reports whether the spec's section writes key.
func sectionHasKey(root *yaml.Node, section, key string) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != section || root.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		m := root.Content[i+1]
		for j := 0; j < len(m.Content); j += 2 {
			if m.Content[j].Value == key {
				return true
			}
		}
	}
	return false
}

// modelPreset returns the value of model.preset when the spec's model section names one.
func modelPreset(root *yaml.Node) string {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "model" || root.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		model := root.Content[i+1]
		for j := 0; j+1 < len(model.Content); j += 2 {
			if model.Content[j].Value == "preset" && model.Content[j+1].Kind == yaml.ScalarNode {
				return model.Content[j+1].Value
			}
		}
	}
	return ""
}

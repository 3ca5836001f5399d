package jobspec

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"gopkg.in/yaml.v3"
)

// AutoFloat is a number that may be left to a rule: "auto" or a number. Its zero value is
// the number 0, not auto. A pinned number encodes exactly as a plain float64 field did, so
// a spec stored before "auto" existed decodes to the same numbers and encodes to the same
// bytes.
type AutoFloat struct {
	// IsAuto is true for "auto"; V is then 0.
	IsAuto bool
	// V is the number when IsAuto is false.
	V float64
}

// AutoValue is the "auto" AutoFloat.
func AutoValue() AutoFloat { return AutoFloat{IsAuto: true} }

// Pinned is the number v.
func Pinned(v float64) AutoFloat { return AutoFloat{V: v} }

// Or is the pinned number, or def for "auto".
func (a AutoFloat) Or(def float64) float64 {
	if a.IsAuto {
		return def
	}
	return a.V
}

// String is "auto" or the number in Go's shortest form.
func (a AutoFloat) String() string {
	if a.IsAuto {
		return "auto"
	}
	return strconv.FormatFloat(a.V, 'g', -1, 64)
}

// ParseAutoFloat reads "auto" or a finite number; the error names field (a spec path or a
// flag).
func ParseAutoFloat(field, s string) (AutoFloat, error) {
	var a AutoFloat
	if err := a.parse(s); err != nil {
		return a, fmt.Errorf("%s: %w", field, err)
	}
	return a, nil
}

func (a *AutoFloat) parse(s string) error {
	if s == "auto" {
		*a = AutoValue()
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Errorf("must be \"auto\" or a number, got %q", s)
	}
	*a = Pinned(v)
	return nil
}

// UnmarshalYAML accepts "auto" or a number scalar.
func (a *AutoFloat) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be \"auto\" or a number, got a %s", kindName(n.Kind))
	}
	return a.parse(n.Value)
}

// MarshalYAML writes "auto" or the number.
func (a AutoFloat) MarshalYAML() (any, error) {
	if a.IsAuto {
		return "auto", nil
	}
	return a.V, nil
}

// MarshalJSON writes "auto" or the number as encoding/json writes a float64.
func (a AutoFloat) MarshalJSON() ([]byte, error) {
	if a.IsAuto {
		return []byte(`"auto"`), nil
	}
	return json.Marshal(a.V)
}

// UnmarshalJSON accepts "auto" or a number.
func (a *AutoFloat) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return a.parse(s)
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("must be \"auto\" or a number, got %s", b)
	}
	*a = Pinned(v)
	return nil
}

package jobspec

import (
	"encoding/json"
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// AutoInt is a count that may be left to the planner: "auto" or an integer. Its zero value
// is the integer 0 (which Validate rejects where a count must be ≥ 1), not auto.
type AutoInt struct {
	// IsAuto is true for "auto"; N is then 0.
	IsAuto bool
	// N is the count when IsAuto is false.
	N int
}

// Auto is the "auto" value.
func Auto() AutoInt { return AutoInt{IsAuto: true} }

// Fixed is the count n.
func Fixed(n int) AutoInt { return AutoInt{N: n} }

// String is "auto" or the decimal count.
func (a AutoInt) String() string {
	if a.IsAuto {
		return "auto"
	}
	return strconv.Itoa(a.N)
}

func (a *AutoInt) parse(s string) error {
	if s == "auto" {
		*a = Auto()
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("must be \"auto\" or an integer, got %q", s)
	}
	*a = Fixed(n)
	return nil
}

// UnmarshalYAML accepts "auto" or an integer scalar.
func (a *AutoInt) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be \"auto\" or an integer, got a %s", kindName(n.Kind))
	}
	return a.parse(n.Value)
}

// MarshalYAML writes "auto" or the integer.
func (a AutoInt) MarshalYAML() (any, error) {
	if a.IsAuto {
		return "auto", nil
	}
	return a.N, nil
}

// MarshalJSON writes "auto" or the integer.
func (a AutoInt) MarshalJSON() ([]byte, error) {
	if a.IsAuto {
		return []byte(`"auto"`), nil
	}
	return []byte(strconv.Itoa(a.N)), nil
}

// UnmarshalJSON accepts "auto" or an integer.
func (a *AutoInt) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return a.parse(s)
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("must be \"auto\" or an integer, got %s", b)
	}
	*a = Fixed(n)
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.AliasNode:
		return "alias"
	case yaml.DocumentNode:
		return "document"
	default:
		return "scalar"
	}
}

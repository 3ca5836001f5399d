package testnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Topology is the shape of a testnet: its nodes and the emulated links between regions.
// It is what a topology YAML file holds (docs/testnet.md).
type Topology struct {
	// Nodes are started in order; the first bootstraps the mesh and the Raft group.
	Nodes []NodeSpec `yaml:"nodes" json:"nodes"`
	// Links override the defaults for pairs of regions (DefaultLocalLink within a region,
	// DefaultWANLink between two). A link applies in both directions.
	Links []LinkSpec `yaml:"links" json:"links,omitempty"`
}

// NodeSpec is one node of a topology.
type NodeSpec struct {
	// Name identifies the node in the testnet's commands (kill, partition). Required:
	// letters, digits, '-' and '_'.
	Name string `yaml:"name" json:"name"`
	// Region is the emulated location; links are per pair of regions. Empty means "local".
	Region string `yaml:"region" json:"region"`
	// Slowdown makes the node's kernels this many times slower (≥ 1); 0 means 1.
	Slowdown float64 `yaml:"slowdown" json:"slowdown"`
	// Memory is the memory budget the node offers (a size such as 512MiB or a share such
	// as 50%); empty keeps the node's default (80% of available memory).
	Memory string `yaml:"memory" json:"memory,omitempty"`
	// Threads caps the node's kernel threads; 0 means all cores.
	Threads int `yaml:"threads" json:"threads,omitempty"`
	// Env adds variables to the node's environment, such as a fault-injection hook
	// (node.CrashInCheckpointEnv). Names are upper-case letters, digits and '_'.
	Env map[string]string `yaml:"env" json:"env,omitempty"`
	// LocalData are the local datasets the node exposes, each "NAME=PATH" as its
	// --local-data flag takes it (the node checks them when it starts). Empty: none.
	LocalData []string `yaml:"local_data" json:"local_data,omitempty"`
}

// LinkSpec sets the emulated link between two regions, as written in YAML.
type LinkSpec struct {
	// Between names the two regions (the same one twice for links inside a region).
	Between []string `yaml:"between" json:"between"`
	// Latency is the one-way delay, a Go duration ("20ms"). Empty keeps the default.
	Latency string `yaml:"latency" json:"latency,omitempty"`
	// Bandwidth is the cap per direction: "100Mbit", "1Gbit", "500kbit" ("/s" or "ps"
	// suffixes accepted), "0" or "unlimited" for none. Empty keeps the default.
	Bandwidth string `yaml:"bandwidth" json:"bandwidth,omitempty"`
	// Loss is the probability a packet is dropped: "0.01" or "1%". Empty means 0.
	Loss string `yaml:"loss" json:"loss,omitempty"`
}

// LinkParams is an emulated directed link.
type LinkParams struct {
	// Latency is the one-way propagation delay added to every packet.
	Latency time.Duration
	// BytesPerSec caps the rate; packets queue behind each other (serialisation delay).
	// 0 means no cap.
	BytesPerSec float64
	// Loss is the probability in [0, 1) that a packet is dropped.
	Loss float64
}

// Default links: a data centre inside a region, a long-haul path between two.
var (
	DefaultLocalLink = LinkParams{Latency: time.Millisecond, BytesPerSec: 1e9 / 8}
	DefaultWANLink   = LinkParams{Latency: 20 * time.Millisecond, BytesPerSec: 100e6 / 8}
)

// DefaultSlowdowns are the slowdowns of the default topology, repeated for more nodes.
var DefaultSlowdowns = []float64{1, 1, 2, 3}

// DefaultRegions are the regions of the default topology; nodes alternate between them.
var DefaultRegions = []string{"eu", "us"}

// DefaultMemory is the memory budget of the default topology's nodes: emulated devices
// too small to hold the default job's model alone, as volunteers' GPUs are (its weights,
// gradients and AdamW moments need 13.4 MiB before any activation), as in the Sky
// Computing setting of federated devices. Every replica of the default job is therefore
// a pipeline of at least two nodes, and the balancer cuts it by the nodes' measured speeds
// and memory. A topology file sets any budget, or none (the node's default: 80% of
// available memory).
const DefaultMemory = "12MiB"

// DefaultRegion is the region of a node that names none.
const DefaultRegion = "local"

// DefaultTopology is n nodes named node0…node{n-1}, alternating between DefaultRegions,
// with DefaultSlowdowns, the default links and DefaultMemory. Four nodes give two regions
// with slowdowns 1, 1, 2 and 3.
func DefaultTopology(n int) Topology {
	t := Topology{}
	for i := range n {
		t.Nodes = append(t.Nodes, NodeSpec{
			Name:     fmt.Sprintf("node%d", i),
			Region:   DefaultRegions[i%len(DefaultRegions)],
			Slowdown: DefaultSlowdowns[i%len(DefaultSlowdowns)],
			Memory:   DefaultMemory,
		})
	}
	return t
}

// ParseTopology decodes a topology YAML file strictly (unknown fields are errors), fills
// in defaults and validates it. Errors name the field: `nodes[2].slowdown: must be ≥ 1`.
func ParseTopology(b []byte) (Topology, error) {
	var t Topology
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil && !errors.Is(err, io.EOF) {
		return t, fmt.Errorf("topology: %w", err)
	}
	if err := t.Validate(); err != nil {
		return t, err
	}
	return t, nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)

// Validate fills in defaults (region, slowdown) and checks every field, reporting all
// problems at once.
func (t *Topology) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(t.Nodes) == 0 {
		bad("nodes: at least one node is needed")
	}
	names, regions := map[string]bool{}, map[string]bool{}
	for i := range t.Nodes {
		n := &t.Nodes[i]
		f := fmt.Sprintf("nodes[%d]", i)
		switch {
		case !nameRE.MatchString(n.Name):
			bad("%s.name: %q must be 1–32 letters, digits, '-' or '_'", f, n.Name)
		case names[n.Name]:
			bad("%s.name: %q is used twice", f, n.Name)
		}
		names[n.Name] = true
		if n.Region == "" {
			n.Region = DefaultRegion
		}
		if !nameRE.MatchString(n.Region) {
			bad("%s.region: %q must be 1–32 letters, digits, '-' or '_'", f, n.Region)
		}
		regions[n.Region] = true
		if n.Slowdown == 0 {
			n.Slowdown = 1
		}
		if n.Slowdown < 1 || math.IsInf(n.Slowdown, 0) || math.IsNaN(n.Slowdown) {
			bad("%s.slowdown: must be ≥ 1 (got %v)", f, n.Slowdown)
		}
		if n.Memory != "" {
			if err := checkMemory(n.Memory); err != nil {
				bad("%s.memory: %v", f, err)
			}
		}
		if n.Threads < 0 {
			bad("%s.threads: must be ≥ 0 (got %d)", f, n.Threads)
		}
		for k := range n.Env {
			if !envNameRE.MatchString(k) {
				bad("%s.env: %q is not a variable name (A-Z, 0-9, _)", f, k)
			}
		}
		for _, d := range n.LocalData {
			if name, path, ok := strings.Cut(d, "="); !ok || name == "" || path == "" || strings.Contains(d, ",") {
				bad("%s.local_data: %q is not NAME=PATH (without commas)", f, d)
			}
		}
	}
	for i, n := range t.Nodes {
		if names[n.Region] {
			bad("nodes[%d].region: %q is also a node's name; partitions would be ambiguous", i, n.Region)
		}
	}
	for i, l := range t.Links {
		if _, err := l.params(regions, LinkParams{}); err != nil {
			bad("links[%d].%v", i, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("topology: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Link returns the emulated link between two regions: the last matching LinkSpec, else
// the default for a pair inside a region or between two.
func (t *Topology) Link(a, b string) LinkParams {
	base := DefaultWANLink
	if a == b {
		base = DefaultLocalLink
	}
	for _, l := range t.Links {
		if len(l.Between) == 2 && (l.Between[0] == a && l.Between[1] == b || l.Between[0] == b && l.Between[1] == a) {
			if p, err := l.params(nil, base); err == nil {
				base = p
			}
		}
	}
	return base
}

// params applies l over base. A nil regions skips the check that both regions exist.
func (l LinkSpec) params(regions map[string]bool, base LinkParams) (LinkParams, error) {
	p := base
	if len(l.Between) != 2 {
		return p, fmt.Errorf("between: must name two regions (got %d)", len(l.Between))
	}
	for _, r := range l.Between {
		if regions != nil && !regions[r] {
			return p, fmt.Errorf("between: no node is in region %q", r)
		}
	}
	var err error
	if l.Latency != "" {
		if p.Latency, err = time.ParseDuration(l.Latency); err != nil || p.Latency < 0 {
			return p, fmt.Errorf("latency: %q is not a duration ≥ 0 (e.g. 20ms)", l.Latency)
		}
	}
	if l.Bandwidth != "" {
		if p.BytesPerSec, err = ParseBandwidth(l.Bandwidth); err != nil {
			return p, fmt.Errorf("bandwidth: %w", err)
		}
	}
	if l.Loss != "" {
		if p.Loss, err = parseLoss(l.Loss); err != nil {
			return p, fmt.Errorf("loss: %w", err)
		}
	}
	return p, nil
}

// ParseBandwidth reads a rate in bits per second ("100Mbit", "1Gbit/s", "500kbps", "0",
// "unlimited"; the prefix in either case: "100mbit") and returns bytes per second; 0 means
// no cap.
func ParseBandwidth(s string) (float64, error) {
	v := strings.TrimSpace(s)
	if v == "unlimited" || v == "0" {
		return 0, nil
	}
	v = strings.TrimSuffix(v, "/s")
	if strings.HasSuffix(v, "bps") {
		v = strings.TrimSuffix(v, "bps")
	} else {
		v = strings.TrimSuffix(v, "bit")
	}
	mult := 1.0
	switch {
	case strings.HasSuffix(v, "k"), strings.HasSuffix(v, "K"):
		mult, v = 1e3, v[:len(v)-1]
	case strings.HasSuffix(v, "M"), strings.HasSuffix(v, "m"): // bits: no milli-rates
		mult, v = 1e6, v[:len(v)-1]
	case strings.HasSuffix(v, "G"), strings.HasSuffix(v, "g"):
		mult, v = 1e9, v[:len(v)-1]
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a rate (e.g. 100Mbit, 1Gbit, 500kbit, unlimited)", s)
	}
	return f * mult / 8, nil
}

func parseLoss(s string) (float64, error) {
	v, div := strings.TrimSpace(s), 1.0
	if strings.HasSuffix(v, "%") {
		v, div = strings.TrimSuffix(v, "%"), 100
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f/div < 0 || f/div >= 1 {
		return 0, fmt.Errorf("%q is not a probability in [0, 1) (e.g. 0.01 or 1%%)", s)
	}
	return f / div, nil
}

var envNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,63}$`)

var memoryRE = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?)\s*(%|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?$`)

// checkMemory accepts what `meshnode join --memory-budget` accepts: a size or a share.
func checkMemory(s string) error {
	m := memoryRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return fmt.Errorf("%q is not a size or share (e.g. 512MiB, 2GiB, 50%%)", s)
	}
	if m[3] == "%" {
		if f, _ := strconv.ParseFloat(m[1], 64); f <= 0 || f > 100 {
			return fmt.Errorf("%q: a share must be in (0%%, 100%%]", s)
		}
	}
	return nil
}

package testnet

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultTopology(t *testing.T) {
	topo := DefaultTopology(4)
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	var slow []float64
	regions := map[string]int{}
	for _, n := range topo.Nodes {
		slow = append(slow, n.Slowdown)
		regions[n.Region]++
	}
	if len(regions) != 2 || regions["eu"] != 2 || regions["us"] != 2 {
		t.Errorf("regions %v, want two nodes in each of eu and us", regions)
	}
	if got := slow; len(got) != 4 || got[0] != 1 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Errorf("slowdowns %v, want [1 1 2 3]", got)
	}
	if l := topo.Link("eu", "us"); l != DefaultWANLink {
		t.Errorf("eu–us link %+v, want the WAN default", l)
	}
	if l := topo.Link("eu", "eu"); l != DefaultLocalLink {
		t.Errorf("eu–eu link %+v, want the local default", l)
	}
}

func TestParseTopology(t *testing.T) {
	topo, err := ParseTopology([]byte(`
nodes:
  - {name: a, region: eu, slowdown: 2, memory: 512MiB}
  - {name: b, region: us}
  - {name: c}
links:
  - between: [us, eu]
    latency: 40ms
    bandwidth: 50Mbit/s
    loss: 1%
`))
	if err != nil {
		t.Fatal(err)
	}
	if topo.Nodes[1].Slowdown != 1 || topo.Nodes[2].Region != DefaultRegion {
		t.Errorf("defaults not filled in: %+v", topo.Nodes)
	}
	want := LinkParams{Latency: 40 * time.Millisecond, BytesPerSec: 50e6 / 8, Loss: 0.01}
	if got := topo.Link("eu", "us"); got != want {
		t.Errorf("eu–us link %+v, want %+v", got, want)
	}
	if got := topo.Link("local", "eu"); got != DefaultWANLink {
		t.Errorf("local–eu link %+v, want the WAN default", got)
	}
}

func TestParseTopologyErrorsNameTheField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{`nodes: []`, "nodes: at least one node"},
		{`nodes: [{name: a, slowdon: 2}]`, "slowdon"},
		{`nodes: [{name: a, slowdown: 0.5}]`, "nodes[0].slowdown: must be ≥ 1"},
		{`nodes: [{name: a}, {name: a}]`, `nodes[1].name: "a" is used twice`},
		{`nodes: [{name: "a b"}]`, "nodes[0].name"},
		{`nodes: [{name: a, memory: lots}]`, "nodes[0].memory"},
		{`nodes: [{name: a, region: a}]`, "nodes[0].region"},
		{`nodes: [{name: a}]
links: [{between: [local, mars]}]`, `links[0].between: no node is in region "mars"`},
		{`nodes: [{name: a}]
links: [{between: [local]}]`, "links[0].between: must name two regions"},
		{`nodes: [{name: a}]
links: [{between: [local, local], latency: soon}]`, "links[0].latency"},
		{`nodes: [{name: a}]
links: [{between: [local, local], bandwidth: fast}]`, "links[0].bandwidth"},
		{`nodes: [{name: a}]
links: [{between: [local, local], loss: 2}]`, "links[0].loss"},
	}
	for _, c := range cases {
		_, err := ParseTopology([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	cases := map[string]float64{"100Mbit": 12.5e6, "1Gbit/s": 125e6, "500kbps": 62.5e3, "8000": 1000, "unlimited": 0, "0": 0, "20mbit": 2.5e6, "1gbit": 125e6}
	for in, want := range cases {
		if got, err := ParseBandwidth(in); err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1Mbit", "Mbit"} {
		if _, err := ParseBandwidth(in); err == nil {
			t.Errorf("ParseBandwidth(%q) accepted", in)
		}
	}
}

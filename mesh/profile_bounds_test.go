package mesh

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestProfileBounds: a heartbeat whose profile lies beyond physical bounds (issue 25:
// gemm_gflops 1e300, memory_budget_bytes 2^64−1, a link with rtt −1, which the balancer
// turned into +Inf, −1 and an error that failed every new job) is refused as malformed,
// the field named; a real machine's profile, with its links, passes.
func TestProfileBounds(t *testing.T) {
	other := testPeerID(t).String()
	link := func(rtt, bw float64) []ProfileLink {
		return []ProfileLink{{Peer: other, RTTSeconds: rtt, BandwidthBps: bw}}
	}
	honest := func() *Profile {
		p := validHeartbeat(t).Profile
		p.TrainGFLOPS, p.Slowdown, p.DiskFreeBytes, p.MemoryTotalBytes = 30, 1, 2<<40, 512<<30
		p.DiskReadBps, p.DiskWriteBps, p.Links = 3e9, 2e9, link(0.08, 12.5e6)
		return p
	}
	if err := honest().Validate(); err != nil {
		t.Fatalf("an honest profile refused: %v", err)
	}
	many := make([]ProfileLink, MaxProfileLinks+1)
	for i := range many {
		many[i] = ProfileLink{Peer: other, RTTSeconds: 1e-3, BandwidthBps: 1e6}
	}
	p := honest()
	p.Links = many
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "513 links") {
		t.Errorf("513 links: %v", err)
	}
	for _, c := range []struct {
		want string
		lie  func(*Profile)
	}{
		{"gemm_gflops 1e+300", func(p *Profile) { p.GemmGFLOPS = 1e300 }},
		{"train_gflops 1e+08", func(p *Profile) { p.TrainGFLOPS = 1e8 }},
		{"train_micro_gflops 1e+08", func(p *Profile) { p.TrainMicroGFLOPS = 1e8 }},
		{"train_micro_gflops -1", func(p *Profile) { p.TrainMicroGFLOPS = -1 }},
		{"train_host_share 1.5", func(p *Profile) { p.TrainHostShare = 1.5 }},
		{"train_host_share -0.1", func(p *Profile) { p.TrainHostShare = -0.1 }},
		{"memory_budget_bytes 18446744073709551615", func(p *Profile) { p.MemoryBudgetBytes = math.MaxUint64 }},
		{"memory_total_bytes", func(p *Profile) { p.MemoryTotalBytes = 1 << 62 }},
		{"memory_available_bytes", func(p *Profile) { p.MemoryAvailableBytes = math.MaxUint64 }},
		{"disk_free_bytes", func(p *Profile) { p.DiskFreeBytes = math.MaxUint64 }},
		{"gpus.memory_total_bytes", func(p *Profile) { p.GPUs[0].MemoryTotalBytes = math.MaxUint64 }},
		{"slowdown 1e+300", func(p *Profile) { p.Slowdown = 1e300 }},
		{"cores", func(p *Profile) { p.Cores = 1 << 40 }},
		{"disk_read_bps", func(p *Profile) { p.DiskReadBps = 1e300 }},
		{"links[0].rtt_s -1", func(p *Profile) { p.Links = link(-1, 1e9) }},
		{"links[0].rtt_s NaN", func(p *Profile) { p.Links = link(math.NaN(), 1e9) }},
		{"links[0].rtt_s 1e+09", func(p *Profile) { p.Links = link(1e9, 1e9) }},
		{"links[0].bandwidth_bps -1", func(p *Profile) { p.Links = link(1e-3, -1) }},
		{"links[0].bandwidth_bps +Inf", func(p *Profile) { p.Links = link(1e-3, math.Inf(1)) }},
		{"links[0].bandwidth_bps 1e-300", func(p *Profile) { p.Links = link(1e-3, 1e-300) }},
		{"links[0].peer", func(p *Profile) { p.Links = []ProfileLink{{Peer: "not-a-peer", RTTSeconds: 1e-3, BandwidthBps: 1e6}} }},
		{"data_addr", func(p *Profile) { p.DataAddr = strings.Repeat("x", 300) }},
		{"local_data lists 33", func(p *Profile) {
			for i := range 33 {
				p.LocalData = append(p.LocalData, fmt.Sprintf("d%d", i))
			}
		}},
		{`local_data "/etc/passwd"`, func(p *Profile) { p.LocalData = []string{"/etc/passwd"} }},
		{`local_data "web"`, func(p *Profile) { p.LocalData = []string{"web", "web"} }},
	} {
		hb := validHeartbeat(t)
		hb.Profile = honest()
		c.lie(hb.Profile)
		b, err := encodeHeartbeat(hb)
		if err != nil {
			if strings.Contains(c.want, "NaN") || strings.Contains(c.want, "Inf") {
				// JSON cannot carry them: Validate is what catches them in memory.
				if verr := hb.Profile.Validate(); verr == nil || !strings.Contains(verr.Error(), c.want) {
					t.Errorf("%s: Validate said %v", c.want, verr)
				}
				continue
			}
			t.Fatal(err)
		}
		if _, err := decodeHeartbeat(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("heartbeat with %s: got %v, want a refusal naming it", c.want, err)
		}
	}
}

package node

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node/fingerprint"
)

func TestConfigValidate(t *testing.T) {
	good := testConfig(t)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"no data dir":       func(c *Config) { c.DataDir = "" },
		"public API":        func(c *Config) { c.API = "0.0.0.0:7070" },
		"API without port":  func(c *Config) { c.API = "127.0.0.1" },
		"bad listen":        func(c *Config) { c.Listen = []string{"tcp/1"} },
		"bootstrap w/o id":  func(c *Config) { c.Bootstrap = []string{"/ip4/1.2.3.4/tcp/1"} },
		"bad allow":         func(c *Config) { c.Allow = []string{"nope"} },
		"slowdown below 1":  func(c *Config) { c.Profile.Slowdown = 0.5 },
		"budget fraction 2": func(c *Config) { c.MemoryBudgetFraction = 2 },
		"relay circuits":    func(c *Config) { c.Relay.MaxCircuits = -1 },
		"relay duration":    func(c *Config) { c.Relay.CircuitDuration = -time.Second },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := good
	c.JoinSecret = ""
	if _, err := New(c); err == nil {
		t.Error("node without join secret or allowlist started")
	}
}

// TestPlanProfileCarriesDiskBandwidths: the balancer's view of a profile keeps the
// measured disk bandwidths, which price offloaded training state, the free space that
// bounds it (issue 25), and the host identity, which prices co-located nodes' shares of it
// (an emulated slowdown claims no smaller share).
func TestPlanProfileCarriesDiskBandwidths(t *testing.T) {
	prof := mesh.Profile{GemmGFLOPS: 100, TrainGFLOPS: 40, MemoryBudgetBytes: 1 << 30,
		DiskReadBps: 500e6, DiskWriteBps: 250e6, DiskFreeBytes: 20 << 30, DataAddr: "127.0.0.1:1", Host: "3f2a9c0d51e7b684", Slowdown: 3}
	pp := planProfile(&prof)
	if pp == nil || pp.DiskReadBps != 500e6 || pp.DiskWriteBps != 250e6 || pp.GFLOPS != 40 || pp.Host != prof.Host || pp.HostShare != 0 {
		t.Errorf("the balancer's profile %+v does not carry the training rate, disk bandwidths and host", pp)
	}
	if pp == nil || pp.DiskFreeBytes == nil || *pp.DiskFreeBytes != 20<<30 {
		t.Errorf("the balancer's profile %+v does not carry the announced free disk", pp)
	}
}

// TestPlanProfileCarriesMicroEfficiency: the balancer prices a stage's micro-batch size
// with the profile's two training rates (one-sequence passes over 8-sequence ones), and
// the profile measures them at the sizes the balancer's constants name.
func TestPlanProfileCarriesMicroEfficiency(t *testing.T) {
	prof := mesh.Profile{GemmGFLOPS: 100, TrainGFLOPS: 40, TrainMicroGFLOPS: 30, MemoryBudgetBytes: 1 << 30, DataAddr: "127.0.0.1:1"}
	if pp := planProfile(&prof); pp == nil || pp.MicroEfficiency != 0.75 || pp.GFLOPS != 40 {
		t.Errorf("the balancer's profile %+v: want micro-batch efficiency 0.75 at 40 GFLOP/s", pp)
	}
	prof.TrainMicroGFLOPS = 0
	if pp := planProfile(&prof); pp == nil || pp.MicroEfficiency != 0 {
		t.Errorf("a profile without the one-sequence rate gave efficiency %v, want 0 (priced as before)", pp.MicroEfficiency)
	}
	prof.TrainHostShare = 0.62
	if pp := planProfile(&prof); pp == nil || pp.HostShare != 0.62 {
		t.Errorf("the balancer's profile %+v: want the measured host share 0.62", pp)
	}
	if small, large := fingerprint.MicroPassTokens(); small != balancer.SmallMicroTokens || large != balancer.LargeMicroTokens {
		t.Errorf("the profile measures passes of %d and %d tokens; the balancer prices them as %d and %d",
			small, large, balancer.SmallMicroTokens, balancer.LargeMicroTokens)
	}
}

// TestRelayLimitsReachTheMesh: join's --relay-* limits are the relay service's.
func TestRelayLimitsReachTheMesh(t *testing.T) {
	c := testConfig(t)
	c.Relay = mesh.RelayConfig{MaxReservations: 5, MaxCircuits: 3, CircuitBytes: 1 << 20, CircuitDuration: time.Minute}
	mc, err := c.meshConfig()
	if err != nil {
		t.Fatal(err)
	}
	if mc.Relay != c.Relay {
		t.Fatalf("mesh relay config %+v, want %+v", mc.Relay, c.Relay)
	}
}

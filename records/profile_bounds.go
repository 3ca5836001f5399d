package records

import (
	"errors"
	"fmt"
	"math"
)

// Physical bounds on what a profile may claim. They are generous (no machine comes near
// them) and chosen so that nothing derived from a profile overflows: bytes stay below 2^56
// so that a sum over thousands of members fits an int64 (2^64−1 bytes was once cast to −1),
// rates stay far below where products turn +Inf (1e300 GFLOP/s once did).
const (
	// MaxProfileGFLOPS bounds gemm_gflops and train_gflops: 10 PFLOP/s, beyond any node.
	MaxProfileGFLOPS = 1e7
	// MaxProfileMemoryBytes bounds every memory field (host and GPU): 1 PiB.
	MaxProfileMemoryBytes = 1 << 50
	// MaxProfileDiskBytes bounds disk_free_bytes: 64 PiB.
	MaxProfileDiskBytes = 1 << 56
	// MaxProfileRateBps bounds disk rates and link bandwidths: 1 TB/s.
	MaxProfileRateBps = 1e12
	// MinLinkBandwidthBps is the least measured bandwidth a link may claim (0 means not
	// measured): below it, transfer times overflow to +Inf.
	MinLinkBandwidthBps = 1
	// MaxProfileRTTSeconds bounds a link's round-trip time.
	MaxProfileRTTSeconds = 60
	// MaxProfileSlowdown bounds the emulated slowdown factor.
	MaxProfileSlowdown = 1e4
	// MaxProfileCores bounds cores and a GPU's multiprocessors.
	MaxProfileCores = 1 << 16
	// MaxProfileLinks bounds how many measured links one profile carries (about 100 bytes
	// each: 512 of them fit a 64 KiB heartbeat).
	MaxProfileLinks = 512
)

// checkBounds checks what Validate's type checks leave open: upper bounds on every number,
// and the links (count, peer IDs, finite non-negative bounded rtt and bandwidth). Each
// error names the field and the bound.
func (p *Profile) checkBounds() error {
	errs := []error{
		atMost("gemm_gflops", p.GemmGFLOPS, MaxProfileGFLOPS),
		atMost("train_gflops", p.TrainGFLOPS, MaxProfileGFLOPS),
		atMost("train_micro_gflops", p.TrainMicroGFLOPS, MaxProfileGFLOPS),
		atMost("slowdown", p.Slowdown, MaxProfileSlowdown),
		atMost("disk_read_bps", p.DiskReadBps, MaxProfileRateBps),
		atMost("disk_write_bps", p.DiskWriteBps, MaxProfileRateBps),
		atMost("cores", float64(p.Cores), MaxProfileCores),
		bytesAtMost("memory_total_bytes", p.MemoryTotalBytes, MaxProfileMemoryBytes),
		bytesAtMost("memory_available_bytes", p.MemoryAvailableBytes, MaxProfileMemoryBytes),
		bytesAtMost("memory_budget_bytes", p.MemoryBudgetBytes, MaxProfileMemoryBytes),
		bytesAtMost("disk_free_bytes", p.DiskFreeBytes, MaxProfileDiskBytes),
	}
	for _, g := range p.GPUs {
		errs = append(errs,
			bytesAtMost("gpus.memory_total_bytes", g.MemoryTotalBytes, MaxProfileMemoryBytes),
			bytesAtMost("gpus.memory_free_bytes", g.MemoryFreeBytes, MaxProfileMemoryBytes),
			atMost("gpus.multiprocessors", float64(g.Multiprocessors), MaxProfileCores))
	}
	for _, s := range []struct{ name, v string }{{"data_addr", p.DataAddr}, {"region", p.Region}, {"host", p.Host}} {
		if len(s.v) > maxProfileString {
			errs = append(errs, fmt.Errorf("profile: %s of %d bytes exceeds %d", s.name, len(s.v), maxProfileString))
		}
	}
	return errors.Join(append(errs, checkLinks(p.Links))...)
}

func checkLinks(links []ProfileLink) error {
	if len(links) > MaxProfileLinks {
		return fmt.Errorf("profile: %d links exceeds %d", len(links), MaxProfileLinks)
	}
	for i, l := range links {
		if !plausiblePeerID(l.Peer) {
			return fmt.Errorf("profile: links[%d].peer %q is not a peer ID", i, truncate(l.Peer, 64))
		}
		if err := errors.Join(nonNegative(fmt.Sprintf("links[%d].rtt_s", i), l.RTTSeconds),
			atMost(fmt.Sprintf("links[%d].rtt_s", i), l.RTTSeconds, MaxProfileRTTSeconds),
			nonNegative(fmt.Sprintf("links[%d].bandwidth_bps", i), l.BandwidthBps),
			atMost(fmt.Sprintf("links[%d].bandwidth_bps", i), l.BandwidthBps, MaxProfileRateBps)); err != nil {
			return err
		}
		if l.BandwidthBps > 0 && l.BandwidthBps < MinLinkBandwidthBps {
			return fmt.Errorf("profile: links[%d].bandwidth_bps %g is below %d (0 means not measured)", i, l.BandwidthBps, MinLinkBandwidthBps)
		}
	}
	return nil
}

// plausiblePeerID is the shape of a libp2p peer ID in its text form: a base58btc multihash
// ("12D3KooW…", "Qm…") or a CIDv1 in base32 ("bafz…"), 32 to 128 characters. The records
// import no libp2p; the mesh, which receives profiles, decodes each link's peer fully.
func plausiblePeerID(s string) bool {
	if len(s) < 32 || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		base58 := c >= '1' && c <= '9' || c >= 'A' && c <= 'Z' && c != 'I' && c != 'O' || c >= 'a' && c <= 'z' && c != 'l'
		if !base58 {
			return false
		}
	}
	return true
}

// nonNegative refuses NaN, ±Inf and negative values.
func nonNegative(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("profile: %s %v is not a finite value ≥ 0", field, v)
	}
	return nil
}

// atMost refuses values above max (NaN and negatives are Validate's or nonNegative's).
func atMost(field string, v, max float64) error {
	if v > max {
		return fmt.Errorf("profile: %s %g exceeds %g", field, v, max)
	}
	return nil
}

func bytesAtMost(field string, v, max uint64) error {
	if v > max {
		return fmt.Errorf("profile: %s %d exceeds %d", field, v, max)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

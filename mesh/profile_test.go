package mesh

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// A peer's heartbeat profile is validated before the balancer sees it: a disk bandwidth
// that is negative, NaN or infinite (what a buggy or hostile member could send to attract
// or repel offloaded stages) is refused with the field named; zero means "not measured".
func TestProfileRefusesBadDiskRates(t *testing.T) {
	var p Profile
	if err := json.Unmarshal([]byte(`{"disk_read_bps":5e8,"disk_write_bps":2.5e8}`), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("measured rates refused: %v", err)
	}
	if err := (&Profile{}).Validate(); err != nil {
		t.Fatalf("unmeasured (zero) rates refused: %v", err)
	}
	for _, c := range []struct {
		p    Profile
		want string
	}{
		{Profile{DiskReadBps: -1}, "disk_read_bps -1"},
		{Profile{DiskWriteBps: math.NaN()}, "disk_write_bps NaN"},
		{Profile{DiskReadBps: math.Inf(1)}, "disk_read_bps +Inf"},
	} {
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error with %q", c.p, err, c.want)
		}
	}
	if err := json.Unmarshal([]byte(`{"disk_read_bps":1e400}`), &p); err == nil {
		t.Error("an out-of-range rate decoded")
	}
}

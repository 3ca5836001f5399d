package mesh

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
)

// A peer's candidate list is bounded and every entry must be host:port: the prober dials
// each of them, so a profile from the network may not name many, long or malformed ones.
func TestProfileDataAddrsValidated(t *testing.T) {
	good := &Profile{DataAddr: "10.211.0.2:4243", DataAddrs: []string{"10.211.0.2:4243", "[2001:db8::2]:4243", "node-1.example.org:4243", "127.0.0.1:4243"}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid candidates refused: %v", err)
	}
	many := make([]string, MaxDataAddrs+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.0.%d:4243", i+1)
	}
	for _, c := range []struct {
		p    Profile
		want string
	}{
		{Profile{DataAddrs: many}, "data addresses exceed"},
		{Profile{DataAddrs: []string{strings.Repeat("a", MaxDataAddrLen) + ":1"}}, "exceeds"},
		{Profile{DataAddrs: []string{"10.0.0.1"}}, "data_addrs[0]"},
		{Profile{DataAddrs: []string{"10.0.0.1:0"}}, "port"},
		{Profile{DataAddrs: []string{"10.0.0.1:70000"}}, "port"},
		{Profile{DataAddrs: []string{":4243"}}, "no host"},
		{Profile{DataAddrs: []string{"[fe80::1%eth0]:4243"}}, "host may hold"},
		{Profile{DataAddrs: []string{"a/b:4243"}}, "host may hold"},
		{Profile{DataAddr: "nope"}, "data_addr:"},
	} {
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q / %q: got %v, want an error with %q", c.p.DataAddr, c.p.DataAddrs, err, c.want)
		}
	}
}

// DataCandidates prefers the list, falls back to the single address of an older release,
// drops duplicates and never returns more than MaxDataAddrs.
func TestDataCandidates(t *testing.T) {
	if got := (&Profile{DataAddr: "10.0.0.1:1"}).DataCandidates(); !slices.Equal(got, []string{"10.0.0.1:1"}) {
		t.Errorf("old profile: %q", got)
	}
	p := &Profile{DataAddr: "10.0.0.1:1", DataAddrs: []string{"10.0.0.2:1", "10.0.0.2:1", "", "10.0.0.1:1"}}
	if got := p.DataCandidates(); !slices.Equal(got, []string{"10.0.0.2:1", "10.0.0.1:1"}) {
		t.Errorf("list: %q", got)
	}
	long := make([]string, 3*MaxDataAddrs)
	for i := range long {
		long[i] = fmt.Sprintf("10.0.1.%d:1", i)
	}
	if got := (&Profile{DataAddrs: long}).DataCandidates(); len(got) != MaxDataAddrs {
		t.Errorf("%d candidates from an oversized list", len(got))
	}
	if (*Profile)(nil).DataCandidates() != nil {
		t.Error("nil profile has candidates")
	}
}

// FuzzValidDataAddr: whatever ValidDataAddr accepts is short, splits into host and port,
// and is an address the data plane can hand to net.ResolveUDPAddr without a zone.
func FuzzValidDataAddr(f *testing.F) {
	for _, s := range []string{"10.0.0.1:4243", "[2001:db8::1]:4243", "example.org:1", "127.0.0.1:0", "[::1%lo]:1", ":1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidDataAddr(s) != nil {
			return
		}
		if len(s) > MaxDataAddrLen {
			t.Fatalf("accepted %d bytes", len(s))
		}
		host, _, err := net.SplitHostPort(s)
		if err != nil || host == "" || strings.ContainsAny(host, "%/ ") {
			t.Fatalf("accepted %q (host %q, %v)", s, host, err)
		}
	})
}

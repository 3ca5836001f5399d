package consensus

import (
	"fmt"
	"strings"
	"testing"
)

// TestNodeBoundedStillJoins: a machine with more addresses than an entry may carry is cut
// to the bound rather than refused, so it can still join.
func TestNodeBoundedStillJoins(t *testing.T) {
	n := Node{ID: "12D3KooWHiKLAJSjSN9Kkx5zNUer56ya91qHnKtGUuQHGh9tEkcE", Status: NodeAlive,
		Profile: Profile{GPUName: strings.Repeat("g", 500)}}
	for i := range 3 * maxAddrs {
		n.Addrs = append(n.Addrs, fmt.Sprintf("/ip4/10.0.%d.%d/tcp/4001", i/250, i%250))
	}
	n.Addrs = append([]string{"/dns4/" + strings.Repeat("x", maxAddrLen) + "/tcp/1"}, n.Addrs...)
	if n.validate() == nil {
		t.Fatal("unbounded node validated")
	}
	b := n.bounded()
	if err := b.validate(); err != nil {
		t.Fatal(err)
	}
	if len(b.Addrs) != maxAddrs || b.Addrs[0] != n.Addrs[1] {
		t.Fatalf("bounded to %d addrs starting %s", len(b.Addrs), b.Addrs[0])
	}
}

func TestJobIDPattern(t *testing.T) {
	for id, ok := range map[string]bool{
		"46fc22df7ae4": true, "j1": true, "a-b_c": true,
		"": false, "../x": false, "a/b": false, ".": false, "A": false, "a.b": false, strings.Repeat("a", 65): false,
	} {
		if got := checkJobID("id", id) == nil; got != ok {
			t.Errorf("job id %q accepted=%v, want %v", id, got, ok)
		}
	}
}

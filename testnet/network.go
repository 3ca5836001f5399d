package testnet

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
)

// ErrUnknownName is returned for a node or region the testnet does not have.
var ErrUnknownName = errors.New("no node or region of that name")

// Network is the emulated WAN between the members of a testnet: which region each member
// is in, which real data-plane address each sends from, the link between every pair of
// regions, and the partitions in force. It keeps one pipe per directed pair of members,
// shared by every relay, so a member's traffic to another crosses one emulated link
// whichever relay carries it. Safe for concurrent use.
type Network struct {
	topo Topology

	mu     sync.RWMutex
	region map[string]string         // member → region
	byAddr map[netip.AddrPort]string // real data-plane address → member
	cuts   map[[2]string]bool        // unordered pairs of member or region names
	pipes  map[[2]string]*pipe       // directed member pairs
	closed bool
	wg     sync.WaitGroup
}

// NewNetwork returns the network of a validated topology; its members are the topology's
// nodes.
func NewNetwork(t Topology) *Network {
	n := &Network{topo: t, region: map[string]string{}, byAddr: map[netip.AddrPort]string{},
		cuts: map[[2]string]bool{}, pipes: map[[2]string]*pipe{}}
	for _, s := range t.Nodes {
		n.region[s.Name] = s.Region
	}
	return n
}

// SetAddr records the real data-plane address member sends from, so that relays know the
// sender of each packet. Packets from addresses no member has are dropped.
func (n *Network) SetAddr(member string, addr netip.AddrPort) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.region[member]; !ok {
		return fmt.Errorf("member %q: %w", member, ErrUnknownName)
	}
	n.byAddr[netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())] = member
	return nil
}

// member names the sender of a packet from addr.
func (n *Network) member(addr netip.AddrPort) (string, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m, ok := n.byAddr[netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())]
	return m, ok
}

// Partition drops every packet between a and b, each a member or a region name, in both
// directions, until Heal.
func (n *Network) Partition(a, b string) error {
	return n.setCut(a, b, true)
}

// Heal ends the partition between a and b.
func (n *Network) Heal(a, b string) error {
	return n.setCut(a, b, false)
}

// Partitions lists the partitions in force, each pair sorted, in order.
func (n *Network) Partitions() [][2]string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([][2]string, 0, len(n.cuts))
	for k := range n.cuts {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i][0] < out[j][0] || out[i][0] == out[j][0] && out[i][1] < out[j][1]
	})
	return out
}

func (n *Network) setCut(a, b string, on bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range []string{a, b} {
		if !n.knownLocked(x) {
			return fmt.Errorf("partition %s %s: %q: %w", a, b, x, ErrUnknownName)
		}
	}
	if a == b {
		return fmt.Errorf("partition %s %s: name two different nodes or regions", a, b)
	}
	k := pairKey(a, b)
	if on {
		n.cuts[k] = true
	} else {
		delete(n.cuts, k)
	}
	return nil
}

func (n *Network) knownLocked(x string) bool {
	if _, ok := n.region[x]; ok {
		return true
	}
	for _, r := range n.region {
		if r == x {
			return true
		}
	}
	return false
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Cut reports whether a partition in force separates members from and to.
func (n *Network) Cut(from, to string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.cutLocked(from, to)
}

// cutLocked reports whether a partition separates members from and to.
func (n *Network) cutLocked(from, to string) bool {
	if len(n.cuts) == 0 {
		return false
	}
	rf, rt := n.region[from], n.region[to]
	for _, a := range []string{from, rf} {
		for _, b := range []string{to, rt} {
			if a != b && n.cuts[pairKey(a, b)] {
				return true
			}
		}
	}
	return false
}

// send carries data from member from to member to over their emulated link, then calls
// deliver with it, unless the link drops it. It never blocks.
func (n *Network) send(from, to string, data []byte, deliver func([]byte)) {
	n.mu.RLock()
	p, cut, closed := n.pipes[[2]string{from, to}], n.cutLocked(from, to), n.closed
	n.mu.RUnlock()
	if closed {
		return
	}
	if p == nil {
		if p = n.pipe(from, to); p == nil {
			return
		}
	}
	if cut {
		p.cut()
		return
	}
	p.enqueue(data, deliver)
}

// pipe returns the pipe from → to, creating and starting it on first use; nil once closed.
func (n *Network) pipe(from, to string) *pipe {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	k := [2]string{from, to}
	if p := n.pipes[k]; p != nil {
		return p
	}
	p := newPipe(n.topo.Link(n.region[from], n.region[to]), uint64(len(n.pipes))+1)
	n.pipes[k] = p
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		p.run()
	}()
	return p
}

// LinkStats is what one directed emulated link did.
type LinkStats struct {
	From, To string
	LinkCounters
}

// Stats returns the counters of every directed link used so far, sorted by From then To.
func (n *Network) Stats() []LinkStats {
	n.mu.RLock()
	out := make([]LinkStats, 0, len(n.pipes))
	for k, p := range n.pipes {
		out = append(out, LinkStats{From: k[0], To: k[1], LinkCounters: p.snapshot()})
	}
	n.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].From < out[j].From || out[i].From == out[j].From && out[i].To < out[j].To
	})
	return out
}

// Close stops every link's goroutine; packets still in flight are dropped.
func (n *Network) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	for _, p := range n.pipes {
		p.close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

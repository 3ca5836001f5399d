//go:build linux

package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Addressing of a Net: the shared segment is PublicSubnet; the NAT host k (from 0) sits
// in 10.211.(k+1).0/24 behind a router whose public address is 10.211.0.(200+k). These
// addresses exist only inside the Net's namespaces.
const (
	PublicSubnet = "10.211.0.0/24"
	maxHosts     = 100
)

// Net is one test's network: a hub namespace holding the segment's bridge, and the hosts
// attached to it.
type Net struct {
	t     testing.TB
	id    string
	hub   string
	hosts []*Host
	nats  int
	owned []string // namespaces to delete, in creation order
}

// Host is one emulated machine: a namespace with loopback and one interface, eth0.
type Host struct {
	Name string
	// NS is the namespace's name (for `ip netns exec`).
	NS string
	// Addr is the host's own IPv4 address on eth0.
	Addr string
	// Public is the address the public segment sees it at: Addr, or its NAT router's.
	Public string
	// NAT says the host is behind a NAT router: it can dial the segment, not be dialled.
	NAT bool
}

// Require skips t unless it runs as root with the ip command (and iptables when nat is
// true), and network namespaces can be created.
func Require(t testing.TB, nat bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	tools := []string{"ip"}
	if nat {
		tools = append(tools, "iptables")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: install iproute2 and iptables (.ci/run does)", tool)
		}
	}
	name := "mnprobe" + randomID(t)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
}

// New creates the hub of a new network; t.Cleanup removes it and every host added later
// (after the processes the test started in them, which the test's own cleanups, run
// first, must stop; any left are killed).
func New(t testing.TB) *Net {
	t.Helper()
	n := &Net{t: t, id: randomID(t)}
	t.Cleanup(n.close)
	n.hub = n.addNS("hub")
	n.ip(n.hub, "link", "add", "br0", "type", "bridge")
	n.ip(n.hub, "link", "set", "br0", "up")
	return n
}

// AddHost adds a host on the public segment with the next free address.
func (n *Net) AddHost(name string) *Host {
	n.t.Helper()
	addr := fmt.Sprintf("10.211.0.%d", 10+len(n.hosts))
	h := &Host{Name: name, NS: n.addNS(name), Addr: addr, Public: addr}
	n.attach(h.NS, "eth0", addr+"/24")
	n.hosts = append(n.hosts, h)
	return h
}

// NAT is how a NAT router maps its host's source ports.
type NAT int

const (
	// PortPreserving keeps a flow's source port where it is free, as Linux's MASQUERADE
	// and many home routers do: a peer that the host sent to from a port can reach it at
	// the router's address and that port.
	PortPreserving NAT = iota
	// PortRandom maps every flow to a random source port (MASQUERADE --random-fully), as
	// carrier-grade and symmetric NATs do: nothing can reach the host at a port it
	// guessed, only over a connection the host opened.
	PortRandom
)

// AddNATHost adds a host behind its own NAT router: the router has a public address on
// the segment and masquerades the host's private subnet (mapping ports as nat says); it
// forwards nothing inbound but replies to connections the host opened, as a home router
// does. The public hosts have no route to the private subnet.
func (n *Net) AddNATHost(name string, nat NAT) *Host {
	n.t.Helper()
	k := n.nats
	n.nats++
	routerPublic := fmt.Sprintf("10.211.0.%d", 200+k)
	lan := fmt.Sprintf("10.211.%d", k+1)
	router := n.addNS(name + "-nat")
	n.attach(router, "eth0", routerPublic+"/24")
	h := &Host{Name: name, NS: n.addNS(name), Addr: lan + ".2", Public: routerPublic, NAT: true}
	n.ip(h.NS, "link", "add", "eth0", "type", "veth", "peer", "name", "lan", "netns", router)
	n.ip(router, "addr", "add", lan+".1/24", "dev", "lan")
	n.ip(router, "link", "set", "lan", "up")
	n.ip(h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
	n.ip(h.NS, "link", "set", "eth0", "up")
	n.ip(h.NS, "route", "add", "default", "via", lan+".1")
	n.run("ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, rule := range [][]string{
		masquerade(lan+".0/24", nat),
		{"-A", "FORWARD", "-i", "eth0", "-o", "lan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
		{"-A", "FORWARD", "-i", "eth0", "-o", "lan", "-j", "DROP"},
	} {
		n.run("ip", append([]string{"netns", "exec", router, "iptables"}, rule...)...)
	}
	n.hosts = append(n.hosts, h)
	return h
}

func masquerade(src string, nat NAT) []string {
	rule := []string{"-t", "nat", "-A", "POSTROUTING", "-s", src, "-o", "eth0", "-j", "MASQUERADE"}
	if nat == PortRandom {
		rule = append(rule, "--random-fully")
	}
	return rule
}

// Command returns a command that runs name with args inside the host's namespace. Its
// process dies with the test binary (Linux parent-death signal).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// attach creates the namespace's eth0 with addr, its peer in the hub's bridge.
func (n *Net) attach(ns, dev, addr string) {
	n.t.Helper()
	port := "p" + strconv.Itoa(len(n.owned))
	n.ip(ns, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", n.hub)
	n.ip(n.hub, "link", "set", port, "master", "br0")
	n.ip(n.hub, "link", "set", port, "up")
	n.ip(ns, "addr", "add", addr, "dev", dev)
	n.ip(ns, "link", "set", dev, "up")
}

// addNS creates a namespace with loopback up.
func (n *Net) addNS(role string) string {
	n.t.Helper()
	if len(n.owned) >= maxHosts {
		n.t.Fatalf("netns: more than %d namespaces", maxHosts)
	}
	name := "mn" + n.id + "-" + role
	n.run("ip", "netns", "add", name)
	n.owned = append(n.owned, name)
	n.ip(name, "link", "set", "lo", "up")
	return name
}

func (n *Net) ip(ns string, args ...string) {
	n.t.Helper()
	n.run("ip", append([]string{"-n", ns}, args...)...)
}

func (n *Net) run(name string, args ...string) {
	n.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		n.t.Fatalf("netns: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// close kills what still runs in the namespaces (only this Net's, so only processes this
// test started) and deletes them, which removes their links.
func (n *Net) close() {
	for i := len(n.owned) - 1; i >= 0; i-- {
		ns := n.owned[i]
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			n.t.Errorf("netns: delete %s: %v: %s", ns, err, out)
		}
	}
}

func randomID(t testing.TB) string {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

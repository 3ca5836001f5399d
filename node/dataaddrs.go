package node

import (
	"net"
	"net/netip"
	"slices"

	"github.com/meshnode/meshnode/mesh"
)

// DataAddrs are the data-plane addresses the node announces, most preferred first:
// DataAdvertise alone when set; the bound address when the data plane listens on one
// host; else dataCandidates of every up interface's addresses and the addresses peers
// observe this host at, with the bound port. Nil before Start.
func (n *Node) DataAddrs() []string {
	if n.cfg.DataAdvertise != "" {
		return []string{n.cfg.DataAdvertise}
	}
	dp := n.DataPlane()
	if dp == nil {
		return nil
	}
	bound, err := netip.ParseAddrPort(dp.Addr())
	if err != nil {
		return []string{dp.Addr()}
	}
	if !bound.Addr().IsUnspecified() {
		return []string{bound.String()}
	}
	return dataCandidates(bound, interfaceIPs(), n.mesh.ObservedIPs())
}

// DataAddr is the preferred data-plane address, the first of DataAddrs; empty before
// Start.
func (n *Node) DataAddr() string {
	if a := n.DataAddrs(); len(a) > 0 {
		return a[0]
	}
	return ""
}

// dataCandidates turns the addresses of a data plane bound to an unspecified host into
// the candidates peers try, in this order: interface IPv4 addresses, observed addresses,
// interface IPv6 addresses, then one loopback address last (peers on the same host, as a
// local testnet, still connect; a peer elsewhere that dials it reaches itself, and the
// handshake, which checks the peer ID, fails at once). An IPv4 wildcard (0.0.0.0) keeps
// IPv4 addresses only; link-local, multicast and unspecified addresses are skipped (a
// link-local IPv6 address would need a zone). At most mesh.MaxDataAddrs.
func dataCandidates(bound netip.AddrPort, ifaces, observed []netip.Addr) []string {
	v4only := bound.Addr().Is4()
	usable := func(ip netip.Addr) bool {
		return ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() && !ip.IsLinkLocalUnicast() &&
			(!v4only || ip.Is4())
	}
	var v4, v6, loop []netip.Addr
	for _, ip := range ifaces {
		ip = ip.Unmap()
		switch {
		case !usable(ip):
		case ip.IsLoopback():
			loop = append(loop, ip)
		case ip.Is4():
			v4 = append(v4, ip)
		default:
			v6 = append(v6, ip)
		}
	}
	var obs []netip.Addr
	for _, ip := range observed {
		if ip = ip.Unmap(); usable(ip) && !ip.IsLoopback() {
			obs = append(obs, ip)
		}
	}
	var out []string
	add := func(ips []netip.Addr, limit int) {
		for _, ip := range ips {
			a := netip.AddrPortFrom(ip, bound.Port()).String()
			if len(out) < limit && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	room := mesh.MaxDataAddrs
	if len(loop) > 0 {
		room-- // keep a place for loopback
	}
	add(v4, room)
	add(obs, room)
	add(v6, room)
	slices.SortStableFunc(loop, func(a, b netip.Addr) int { return boolCmp(a.Is4(), b.Is4()) })
	add(loop[:min(len(loop), 1)], mesh.MaxDataAddrs)
	return out
}

// boolCmp orders true before false.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

// interfaceIPs lists the unicast addresses of every interface that is up.
func interfaceIPs() []netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if pfx, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(pfx.IP); ok {
					out = append(out, ip.Unmap())
				}
			}
		}
	}
	return out
}

// refreshDataAddrs puts the current DataAddrs in the announced profile when they changed
// (an interface came up, a peer observed this host at a new address); the next heartbeat
// carries them. A node not yet measured has no profile to update.
func (n *Node) refreshDataAddrs() {
	n.profMu.Lock()
	defer n.profMu.Unlock()
	p := n.mesh.Profile()
	if p == nil {
		return
	}
	addrs := n.DataAddrs()
	if slices.Equal(addrs, p.DataAddrs) {
		return
	}
	p.DataAddrs, p.DataAddr = addrs, ""
	if len(addrs) > 0 {
		p.DataAddr = addrs[0]
	}
	n.mesh.SetProfile(*p)
	n.log.Info("data-plane addresses announced", "addrs", addrs)
}

package records

import (
	"fmt"
	"net"
	"slices"
	"strconv"
)

// Bounds on the data-plane addresses a profile may carry. The list comes from the network
// and every peer dials its entries, so it is short: a peer's candidates cost at most
// MaxDataAddrs handshake attempts per probe round.
const (
	// MaxDataAddrs is the most data-plane address candidates a profile may list.
	MaxDataAddrs = 8
	// MaxDataAddrLen is the longest candidate, in bytes: a bracketed IPv6 address with a
	// port takes at most 47, a DNS name (from --data-advertise) the rest.
	MaxDataAddrLen = 128
)

// ValidDataAddr checks one data-plane address as a peer announces it: host:port with a
// non-empty host (an IP address or a DNS name, no IPv6 zone) and a port from 1 to 65535,
// at most MaxDataAddrLen bytes.
func ValidDataAddr(a string) error {
	if len(a) > MaxDataAddrLen {
		return fmt.Errorf("data address of %d bytes exceeds %d", len(a), MaxDataAddrLen)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("data address %q: %w", a, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("data address %q: port must be 1–65535", a)
	}
	if host == "" {
		return fmt.Errorf("data address %q: no host", a)
	}
	for _, c := range []byte(host) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == ':'
		if !ok {
			return fmt.Errorf("data address %q: host may hold only letters, digits, '.', '-' and ':'", a)
		}
	}
	return nil
}

// validateDataAddrs checks DataAddr and DataAddrs of a profile from the network.
func (p *Profile) validateDataAddrs() error {
	if len(p.DataAddrs) > MaxDataAddrs {
		return fmt.Errorf("profile: %d data addresses exceed %d", len(p.DataAddrs), MaxDataAddrs)
	}
	if p.DataAddr != "" {
		if err := ValidDataAddr(p.DataAddr); err != nil {
			return fmt.Errorf("profile: data_addr: %w", err)
		}
	}
	for i, a := range p.DataAddrs {
		if err := ValidDataAddr(a); err != nil {
			return fmt.Errorf("profile: data_addrs[%d]: %w", i, err)
		}
	}
	return nil
}

// DataCandidates returns the data-plane addresses to try for the node, in its order of
// preference: DataAddrs, or DataAddr alone from a node that announces no list (an older
// release). It returns at most MaxDataAddrs entries, without duplicates.
func (p *Profile) DataCandidates() []string {
	if p == nil {
		return nil
	}
	src := p.DataAddrs
	if len(src) == 0 && p.DataAddr != "" {
		src = []string{p.DataAddr}
	}
	out := make([]string, 0, min(len(src), MaxDataAddrs))
	for _, a := range src {
		if len(out) == MaxDataAddrs {
			break
		}
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

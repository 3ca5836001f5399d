package mesh

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/records"
)

// The profile a node measures and gossips is package records' (the API serves it too,
// and the API client imports no libp2p); the mesh names it for its own code and callers.
type (
	// Profile is records.Profile: what a node measured about itself.
	Profile = records.Profile
	// ProfileLink is one measured path from the announcing node to a peer.
	ProfileLink = records.ProfileLink
	// GPU describes one device as NVML reports it.
	GPU = records.GPU
)

// Bounds on a profile, as records defines them.
const (
	MaxProfileGFLOPS      = records.MaxProfileGFLOPS
	MaxProfileMemoryBytes = records.MaxProfileMemoryBytes
	MaxProfileDiskBytes   = records.MaxProfileDiskBytes
	MaxProfileRateBps     = records.MaxProfileRateBps
	MinLinkBandwidthBps   = records.MinLinkBandwidthBps
	MaxProfileRTTSeconds  = records.MaxProfileRTTSeconds
	MaxProfileSlowdown    = records.MaxProfileSlowdown
	MaxProfileCores       = records.MaxProfileCores
	MaxProfileLinks       = records.MaxProfileLinks
	MaxDataAddrs          = records.MaxDataAddrs
	MaxDataAddrLen        = records.MaxDataAddrLen
)

// ValidDataAddr checks one data-plane address as a peer announces it (records.ValidDataAddr).
func ValidDataAddr(a string) error { return records.ValidDataAddr(a) }

// validateProfile is what a profile from the network must pass: records' checks, and each
// link's peer decoding as a libp2p peer ID (records checks only its shape).
func validateProfile(p *Profile) error {
	if err := p.Validate(); err != nil {
		return err
	}
	for i, l := range p.Links {
		if _, err := peer.Decode(l.Peer); err != nil {
			return fmt.Errorf("profile: links[%d].peer %q is not a peer ID", i, l.Peer)
		}
	}
	return nil
}

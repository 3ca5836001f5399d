package mesh

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// A heartbeat is one gossipsub message on HeartbeatTopic: a version byte followed by a JSON
// object. gossipsub signs it with the sender's peer key; the decoder bounds the message
// before parsing and every field after.
const (
	heartbeatVersion  byte = 1
	maxHeartbeatBytes      = 64 << 10
	maxHeartbeatAddrs      = 32
	maxAddrBytes           = 512
)

// errHeartbeatVersion marks a heartbeat from a newer (or older) wire version: it is
// ignored, not held against the sender.
var errHeartbeatVersion = errors.New("unknown heartbeat version")

// heartbeat is what a node announces about itself every interval.
type heartbeat struct {
	ID      string   `json:"id"`
	Mesh    string   `json:"mesh"`
	Seq     uint64   `json:"seq"`
	SentAt  int64    `json:"sent_at_ms"`
	Addrs   []string `json:"addrs"`
	Profile *Profile `json:"profile,omitempty"`
	// Leaving announces a clean shutdown: peers mark the sender dead at once.
	Leaving bool `json:"leaving,omitempty"`
}

func encodeHeartbeat(hb *heartbeat) ([]byte, error) {
	body, err := json.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	if 1+len(body) > maxHeartbeatBytes {
		return nil, fmt.Errorf("encode heartbeat: %d bytes exceeds %d", 1+len(body), maxHeartbeatBytes)
	}
	return append([]byte{heartbeatVersion}, body...), nil
}

// decodeHeartbeat parses and checks one heartbeat message.
func decodeHeartbeat(b []byte) (*heartbeat, error) {
	if len(b) == 0 {
		return nil, errors.New("empty heartbeat")
	}
	if len(b) > maxHeartbeatBytes {
		return nil, fmt.Errorf("heartbeat of %d bytes exceeds %d", len(b), maxHeartbeatBytes)
	}
	if b[0] != heartbeatVersion {
		return nil, fmt.Errorf("%w %d", errHeartbeatVersion, b[0])
	}
	var hb heartbeat
	if err := json.Unmarshal(b[1:], &hb); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	if err := hb.check(); err != nil {
		return nil, err
	}
	return &hb, nil
}

func (hb *heartbeat) check() error {
	if _, err := peer.Decode(hb.ID); err != nil {
		return fmt.Errorf("heartbeat id: %w", err)
	}
	if !meshNameRE.MatchString(hb.Mesh) {
		return fmt.Errorf("heartbeat mesh name %q is invalid", hb.Mesh)
	}
	if len(hb.Addrs) > maxHeartbeatAddrs {
		return fmt.Errorf("heartbeat carries %d addresses, more than %d", len(hb.Addrs), maxHeartbeatAddrs)
	}
	for _, a := range hb.Addrs {
		if len(a) > maxAddrBytes {
			return fmt.Errorf("heartbeat address of %d bytes exceeds %d", len(a), maxAddrBytes)
		}
		if _, err := ma.NewMultiaddr(a); err != nil {
			return fmt.Errorf("heartbeat address %q: %w", a, err)
		}
	}
	if hb.Profile != nil {
		return validateProfile(hb.Profile)
	}
	return nil
}

// multiaddrs returns the heartbeat's addresses, already checked by decodeHeartbeat.
func (hb *heartbeat) multiaddrs() []ma.Multiaddr {
	out := make([]ma.Multiaddr, 0, len(hb.Addrs))
	for _, s := range hb.Addrs {
		if a, err := ma.NewMultiaddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

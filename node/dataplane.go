package node

import (
	"context"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/mesh/dataplane"
)

// dataPlaneService runs the node's QUIC tensor data plane, bound to the node's identity
// and admitting only peers the mesh has admitted.
type dataPlaneService struct {
	n   *Node
	key crypto.PrivKey
}

func (s *dataPlaneService) Name() string { return "dataplane" }

func (s *dataPlaneService) Start(ctx context.Context) error {
	cfg := dataplane.DefaultConfig()
	cfg.ListenAddr, cfg.Identity, cfg.Logger = s.n.cfg.DataListen, s.key, s.n.log
	cfg.AllowPeer = func(id string) bool {
		p, err := peer.Decode(id)
		return err == nil && s.n.mesh.IsAdmitted(p)
	}
	dp, err := dataplane.New(ctx, cfg)
	if err != nil {
		return addrInUse(ListenerData, cfg.ListenAddr, err) // dataplane's errors name it already
	}
	s.n.dpMu.Lock()
	s.n.dp = dp
	s.n.dpMu.Unlock()
	return nil
}

func (s *dataPlaneService) Close() error {
	if dp := s.n.DataPlane(); dp != nil {
		return dp.Close()
	}
	return nil
}

// DataPlane is the node's tensor data plane, nil before Start.
func (n *Node) DataPlane() *dataplane.Plane {
	n.dpMu.Lock()
	defer n.dpMu.Unlock()
	return n.dp
}

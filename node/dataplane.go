package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/mesh/dataplane"
	"github.com/meshnode/meshnode/parallel"
)

// The engine reports a peer that breaks the protocol to its transport; the data plane is it.
var _ parallel.MisbehaviourReporter = (*dataplane.Plane)(nil)

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
	cfg.OpenStream = s.openStream
	// A peer the engine caught breaking the protocol loses its libp2p connection too
	// (after the data plane's own), counted as the mesh counts a malformed message.
	cfg.Disconnect = func(id, reason string) {
		if p, err := peer.Decode(id); err == nil {
			s.n.mesh.Disconnect(p, "data-plane frame", errors.New(reason))
		}
	}
	// Frames of a job this node runs no worker of expire (the runner follows the FSM's plans).
	cfg.RunsJob = func(uint64) bool { return false }
	if e := s.n.engine; e != nil {
		cfg.RunsJob = e.runner.RunsFrameJob
	}
	dp, err := dataplane.New(ctx, cfg)
	if err != nil {
		return addrInUse(ListenerData, cfg.ListenAddr, err) // dataplane's errors name it already
	}
	s.n.dpMu.Lock()
	s.n.dp = dp
	s.n.dpMu.Unlock()
	// Tensors to and from members no QUIC path reaches ride libp2p streams, behind admission.
	s.n.mesh.Handle(dataplane.StreamProtocol, func(st network.Stream) { dp.ServeStream(st, s.n.mesh.StreamPath(st)) })
	return nil
}

// openStream opens a tensor stream to a member over the mesh's libp2p host: a relayed
// connection (limited by the relay's per-circuit bounds) is allowed, a direct one preferred.
func (s *dataPlaneService) openStream(ctx context.Context, to string) (network.Stream, string, error) {
	id, err := peer.Decode(to)
	if err != nil {
		return nil, "", fmt.Errorf("%q is not a peer ID: %w", to, err)
	}
	st, err := s.n.mesh.NewStream(network.WithAllowLimitedConn(ctx, "meshnode tensors"), id, dataplane.StreamProtocol)
	if err != nil {
		return nil, "", err
	}
	return st, s.n.mesh.StreamPath(st), nil
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

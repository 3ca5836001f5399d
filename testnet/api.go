package testnet

import (
	"fmt"

	"github.com/meshnode/meshnode/api"
)

// Client returns a client of the API of the node nodeID that serves at addr and keeps its
// data in dataDir, authenticated with the token the node wrote there (the node proves it
// holds it and is nodeID before anything else is sent): the testnet drives its nodes
// through the same client as the CLI, with no step for the user.
func Client(addr, dataDir, nodeID string) (*api.Client, error) {
	cfg, err := api.Locate(addr, dataDir, "")
	if err != nil {
		return nil, fmt.Errorf("node API at %s: %w", addr, err)
	}
	cfg.NodeID = nodeID
	return api.New(cfg)
}

// Client is the API client of n, made when n started.
func (n *Node) Client() *api.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.client
}

// connect makes n's API client once its runtime file names the API.
func (n *Node) connect() error {
	c, err := Client(n.API, n.DataDir, n.ID)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Spec.Name, err)
	}
	n.mu.Lock()
	n.client = c
	n.mu.Unlock()
	return nil
}

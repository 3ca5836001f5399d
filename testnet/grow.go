package testnet

import (
	"context"
	"fmt"
)

// AddMember makes a node known to the network: its region, for the links its packets
// take. The region must be one of the topology's.
func (n *Network) AddMember(name, region string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.region[name]; ok {
		return fmt.Errorf("member %q already exists", name)
	}
	known := false
	for _, r := range n.region {
		known = known || r == region
	}
	if !known {
		return fmt.Errorf("region %q: %w", region, ErrUnknownName)
	}
	n.region[name] = region
	return nil
}

// AddNode starts one more node while the testnet runs, joining through the first node, and
// returns it once its runtime file appears (the caller waits for it to be seen alive).
func (t *Testnet) AddNode(ctx context.Context, spec NodeSpec) (*Node, error) {
	if spec.Slowdown == 0 {
		spec.Slowdown = 1
	}
	if _, err := t.Node(spec.Name); err == nil {
		return nil, fmt.Errorf("node %q already exists", spec.Name)
	}
	if err := t.net.AddMember(spec.Name, spec.Region); err != nil {
		return nil, err
	}
	first := t.Nodes()[0]
	n, err := t.startNode(ctx, spec, first.Addrs)
	if n != nil {
		t.mu.Lock()
		t.nodes = append(t.nodes, n)
		t.mu.Unlock()
	}
	if err != nil {
		return n, err
	}
	if err := t.applyCuts(ctx); err != nil {
		return n, err
	}
	return n, t.SaveState()
}

// Restart starts a killed node again from its data directory: same identity, same Raft
// state, joining through the other nodes. It replaces the node in the testnet.
func (t *Testnet) Restart(ctx context.Context, name string) (*Node, error) {
	old, err := t.Node(name)
	if err != nil {
		return nil, err
	}
	if old.Alive() {
		return nil, fmt.Errorf("node %s is still running", name)
	}
	var bootstrap []string
	for _, n := range t.Nodes() {
		if n != old && n.Alive() {
			bootstrap = append(bootstrap, n.Addrs...)
		}
	}
	old.Relay.Close()
	n, err := t.startNode(ctx, old.Spec, bootstrap)
	if n != nil {
		t.mu.Lock()
		for i, m := range t.nodes {
			if m == old {
				t.nodes[i] = n
			}
		}
		t.mu.Unlock()
	}
	if err != nil {
		return n, err
	}
	if err := t.applyCuts(ctx); err != nil {
		return n, err
	}
	return n, t.SaveState()
}

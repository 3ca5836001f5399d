package testnet

import (
	"context"
	"fmt"
	"strconv"

	"github.com/meshnode/meshnode/node"
)

// Slow changes the emulated slowdown of the running node called name to factor (≥ 1; 1
// turns it off), through its test hook (node.SlowdownPath): the node's kernels take
// factor× their time from then on, while its announced profile keeps the rates it
// measured, as a throttled or shared device's would.
func (t *Testnet) Slow(ctx context.Context, name string, factor float64) error {
	n, err := t.Node(name)
	if err != nil {
		return err
	}
	if !n.Alive() {
		return fmt.Errorf("node %s is not running", name)
	}
	return slowNode(ctx, name, n.DataDir, factor)
}

// SlowNode is Slow for the testnet whose state is in dir (`meshnode testnet slow`): it
// reaches the node's hook through its data directory, with or without a supervisor.
func SlowNode(ctx context.Context, dir, name string, factor float64) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	n, ok := st.Node(name)
	if !ok {
		return fmt.Errorf("node %q: %w", name, ErrUnknownName)
	}
	if !n.Alive {
		return fmt.Errorf("node %s is not running", name)
	}
	return slowNode(ctx, name, n.DataDir, factor)
}

func slowNode(ctx context.Context, name, dataDir string, factor float64) error {
	if !(factor >= 1) {
		return fmt.Errorf("slowdown factor %g: it must be at least 1 (1 turns the emulation off)", factor)
	}
	return putHook(ctx, name, dataDir, node.SlowdownPath, []byte(strconv.FormatFloat(factor, 'g', -1, 64)))
}

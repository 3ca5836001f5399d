package testnet

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Down stops the testnet described by dir/StateFile from any process: it asks the
// supervisor to stop (falling back to SIGTERM), waits for it, then SIGKILLs every node
// process still running and waits until none is. A PID is only signalled while its
// command line still names the testnet's directory, so a reused PID is never touched. It
// returns the PIDs it found running.
func Down(ctx context.Context, dir string, timeout time.Duration) ([]int, error) {
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	var seen []int
	if processAlive(st.Supervisor, st.Dir) {
		seen = append(seen, st.Supervisor)
		if st.Control == "" || NewControlClient(st.Control).Stop(ctx) != nil {
			signalPID(st.Supervisor, syscall.SIGTERM)
		}
		_ = WaitFor(ctx, func() bool { return !processAlive(st.Supervisor, st.Dir) }, timeout)
		if processAlive(st.Supervisor, st.Dir) {
			signalPID(st.Supervisor, syscall.SIGKILL)
		}
	}
	alive := func() []int {
		var out []int
		for _, n := range st.Nodes {
			if processAlive(n.PID, n.DataDir) {
				out = append(out, n.PID)
			}
		}
		return out
	}
	for _, pid := range alive() {
		seen = append(seen, pid)
		signalPID(pid, syscall.SIGKILL)
	}
	if err := WaitFor(ctx, func() bool { return len(alive()) == 0 }, 10*time.Second); err != nil {
		return seen, fmt.Errorf("processes %v survive: %w", alive(), err)
	}
	for i := range st.Nodes {
		st.Nodes[i].Alive = false
	}
	st.Supervisor, st.Control, st.Partitions = 0, "", nil
	return seen, st.Save(dir)
}

func signalPID(pid int, sig syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(sig)
	}
}

// Refresh marks the nodes of st whose process is gone as not alive.
func Refresh(st State) State {
	for i, n := range st.Nodes {
		st.Nodes[i].Alive = n.Alive && processAlive(n.PID, n.DataDir)
	}
	if !processAlive(st.Supervisor, st.Dir) {
		st.Supervisor, st.Control = 0, ""
	}
	return st
}

// KillNode kills a node of the testnet st describes: through its supervisor when it has
// one (which reaps it and updates StateFile), else by SIGKILL to its PID.
func KillNode(ctx context.Context, st State, name string) error {
	n, ok := st.Node(name)
	if !ok {
		return fmt.Errorf("node %q: %w", name, ErrUnknownName)
	}
	if st.Control != "" && processAlive(st.Supervisor, st.Dir) {
		return NewControlClient(st.Control).Kill(ctx, name)
	}
	if !processAlive(n.PID, n.DataDir) {
		return fmt.Errorf("node %s (pid %d) is not running", name, n.PID)
	}
	signalPID(n.PID, syscall.SIGKILL)
	return WaitFor(ctx, func() bool { return !processAlive(n.PID, n.DataDir) }, 10*time.Second)
}

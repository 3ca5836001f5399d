package testnet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/meshnode/meshnode/api"
)

// LogFile is the name of a node's log (its stdout and stderr) in its data directory.
const LogFile = "node.log"

// Node is one `meshnode join` process of a testnet.
type Node struct {
	Spec    NodeSpec
	DataDir string
	// ID, API, Addrs and DataAddr come from the node's runtime file once it has started.
	ID       string
	API      string
	Addrs    []string
	DataAddr string
	// Relay is the WAN relay in front of the node's data plane.
	Relay *Relay

	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when the process has been reaped
	mu     sync.Mutex
	err    error // the process's exit status, once exited
	killed bool
	client *api.Client // the node's API client, set by connect
}

// start execs the node with its output appended to its log.
func (n *Node) start(bin string, args, env []string) error {
	log, err := os.OpenFile(filepath.Join(n.DataDir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = env, log, log, childAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start node %s: %w", n.Spec.Name, err)
	}
	n.cmd, n.log, n.exited = cmd, log, make(chan struct{})
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		log.Close()
		close(n.exited)
	}()
	return nil
}

// PID is the node's process id.
func (n *Node) PID() int {
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Alive reports whether the process still runs.
func (n *Node) Alive() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// waitRuntime polls the node's runtime file until it appears, the process exits or the
// timeout passes.
func (n *Node) waitRuntime(ctx context.Context, timeout time.Duration) (api.RuntimeInfo, error) {
	var info api.RuntimeInfo
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var err error
		if info, err = api.ReadRuntimeFile(n.DataDir); err == nil && info.PID == n.PID() {
			return info, nil
		}
		select {
		case <-n.exited:
			return info, fmt.Errorf("node %s exited during start (%v); its log is %s:\n%s",
				n.Spec.Name, n.exitErr(), n.LogPath(), tailFile(n.LogPath(), 2000))
		case <-ctx.Done():
			return info, fmt.Errorf("node %s did not write %s within %s (%w); its log is %s",
				n.Spec.Name, api.RuntimeFile, timeout, ctx.Err(), n.LogPath())
		case <-tick.C:
		}
	}
}

func (n *Node) exitErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// LogPath is the node's log file.
func (n *Node) LogPath() string { return filepath.Join(n.DataDir, LogFile) }

// kill sends SIGKILL to the node's process group and waits until it is reaped.
func (n *Node) kill() {
	if !n.Alive() {
		return
	}
	n.mu.Lock()
	n.killed = true
	n.mu.Unlock()
	signalGroup(n.cmd.Process, syscall.SIGKILL)
	<-n.exited
}

// stop sends SIGTERM, waits up to timeout, then kills.
func (n *Node) stop(timeout time.Duration) {
	if !n.Alive() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(timeout):
		n.kill()
	}
}

func (n *Node) state() NodeState {
	s := NodeState{Name: n.Spec.Name, ID: n.ID, API: n.API, Region: n.Spec.Region, Slowdown: n.Spec.Slowdown,
		DataAddr: n.DataAddr, DataDir: n.DataDir, Alive: n.Alive()}
	if n.Relay != nil {
		s.Relay = n.Relay.Addr().String()
	}
	s.PID = n.PID()
	return s
}

// tailFile returns the last max bytes of a file, for error messages.
func tailFile(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(-max, 2)
	}
	b := make([]byte, max)
	k, _ := f.Read(b)
	return string(b[:k])
}

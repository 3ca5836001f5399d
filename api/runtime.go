package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RuntimeFile is written in the data directory while a node runs, so that local tools
// (the CLI, the testnet, scripts) find its API and addresses without fixed ports.
const RuntimeFile = "node.json"

// maxRuntimeFile bounds what ReadRuntimeFile reads.
const maxRuntimeFile = 1 << 20

// RuntimeInfo is the content of RuntimeFile.
type RuntimeInfo struct {
	ID    string   `json:"id"`
	API   string   `json:"api"`
	Addrs []string `json:"addrs"`
	PID   int      `json:"pid"`
	// Start identifies the process beyond its PID (ProcessStart: its start time in clock
	// ticks since boot on Linux), so that a PID reused after a crash is not taken for the
	// node. Zero: unknown (checked by PID only).
	Start uint64 `json:"start,omitempty"`
	// DataAddr is the UDP address the data plane is bound to (not the advertised one).
	DataAddr string `json:"data_addr,omitempty"`
}

// ReadRuntimeFile reads the RuntimeFile of a running node's data directory.
func ReadRuntimeFile(dataDir string) (RuntimeInfo, error) {
	var info RuntimeInfo
	path := filepath.Join(dataDir, RuntimeFile)
	st, err := os.Stat(path)
	if err != nil {
		return info, fmt.Errorf("no running node found in %s: %w", dataDir, err)
	}
	if st.Size() > maxRuntimeFile {
		return info, fmt.Errorf("%s: %d bytes, not a runtime file", path, st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return info, fmt.Errorf("no running node found in %s: %w", dataDir, err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// StaleError is the error of a RuntimeFile left by a node that no longer runs (it crashed
// or was killed): its PID has exited, or now belongs to another process.
type StaleError struct {
	Dir string
	PID int
	// Why says what was found: the PID has exited, or another process has it.
	Why string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("no node running in %s (stale %s from PID %d): %s; start the node with `meshnode join --data-dir %s`, or name a running node's API with --api or %s",
		e.Dir, RuntimeFile, e.PID, e.Why, e.Dir, EnvAPI)
}

// ErrNoNode is wrapped by RunningNode's error when dataDir holds no RuntimeFile.
var ErrNoNode = errors.New("no node running")

// RunningNode reads dataDir's RuntimeFile and checks that the process it names still runs
// and is the one that wrote it (same start time, where the system tells): a file left by a
// crash is a *StaleError, a missing one an error wrapping ErrNoNode.
func RunningNode(dataDir string) (RuntimeInfo, error) {
	info, err := ReadRuntimeFile(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("%w in %s (no %s): start the node with `meshnode join --data-dir %s`, or name a running node's API with --api or %s",
			ErrNoNode, dataDir, RuntimeFile, dataDir, EnvAPI)
	}
	if err != nil {
		return info, err
	}
	start, err := ProcessStart(info.PID)
	switch {
	case info.PID <= 0:
		return info, &StaleError{Dir: dataDir, PID: info.PID, Why: "it names no process"}
	case errors.Is(err, os.ErrNotExist):
		return info, &StaleError{Dir: dataDir, PID: info.PID, Why: fmt.Sprintf("PID %d has exited", info.PID)}
	case err != nil:
		return info, fmt.Errorf("%s: check PID %d: %w", filepath.Join(dataDir, RuntimeFile), info.PID, err)
	case info.Start != 0 && start != 0 && start != info.Start:
		return info, &StaleError{Dir: dataDir, PID: info.PID, Why: fmt.Sprintf("PID %d now belongs to another process", info.PID)}
	}
	return info, nil
}

package testnet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// StateFile is the name of the file in a testnet's directory that describes it.
const StateFile = "testnet.json"

// State is the content of StateFile: what later commands (`testnet status`, `kill`,
// `partition`, `down`) need to find a running testnet.
type State struct {
	Dir   string      `json:"dir"`
	Nodes []NodeState `json:"nodes"`
	// Supervisor is the PID of the process that owns the nodes and relays (`testnet up`
	// starts it); 0 when the testnet lives in the process that started it.
	Supervisor int `json:"supervisor_pid,omitempty"`
	// Control is the supervisor's control API (host:port on loopback); empty without one.
	Control string `json:"control,omitempty"`
	// Partitions lists the partitions in force.
	Partitions [][2]string `json:"partitions,omitempty"`
}

// NodeState is one node of State.
type NodeState struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	API  string `json:"api"`
	// PID is the node's process; 0 once it has been stopped or killed and reaped.
	PID      int     `json:"pid"`
	Region   string  `json:"region"`
	Slowdown float64 `json:"slowdown"`
	// DataAddr is the node's real data-plane address; Relay is the relay in front of it
	// (what the node advertises).
	DataAddr string `json:"data_addr,omitempty"`
	Relay    string `json:"relay,omitempty"`
	// Alive is false once the node was killed or has exited.
	Alive bool `json:"alive"`
	// Dir is the node's data directory; its log is Dir/node.log.
	DataDir string `json:"data_dir"`
}

// Node returns the node called name.
func (s *State) Node(name string) (NodeState, bool) {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return NodeState{}, false
}

// Save writes s to dir/StateFile atomically.
func (s *State) Save(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, StateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save testnet state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save testnet state: %w", err)
	}
	return nil
}

// LoadState reads dir/StateFile, from a directory that passes the checks of PrivateDir.
func LoadState(dir string) (State, error) {
	var s State
	if err := checkPrivateIfExists(dir); err != nil {
		return s, err // another user's state file would name the PIDs `down` signals
	}
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("no testnet in %s (start one with `meshnode testnet up --dir %s`): %w", dir, dir, err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

package api

import (
	"encoding/json"
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

package node

import (
	"testing"

	"github.com/meshnode/meshnode/mesh/dataplane"
	"github.com/meshnode/meshnode/node/runner"
	"github.com/meshnode/meshnode/parallel"
)

// TestDataPlaneSigns: the runner hands workers the node's data plane, and a worker signs
// its contributions only on a transport that holds the node key; without it the
// colluders of issue 25 could never be convicted on evidence.
func TestDataPlaneSigns(t *testing.T) {
	var tr parallel.Transport = (*dataplane.Plane)(nil)
	if _, ok := tr.(parallel.SigningTransport); !ok {
		t.Fatal("the data plane holds no signing key: workers on it sign nothing")
	}
}

// TestNodeControlShipsEvidence: the runner ships a worker's offender evidence only
// through a Control that can (runner.EvidenceShipper); the node's must.
func TestNodeControlShipsEvidence(t *testing.T) {
	var c runner.Control = nodeControl{}
	if _, ok := c.(runner.EvidenceShipper); !ok {
		t.Fatal("the node's control cannot ship evidence: no worker's evidence reaches the leader")
	}
}

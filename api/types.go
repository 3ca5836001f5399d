package api

import (
	"time"

	"github.com/meshnode/meshnode/records"
)

// Status is the body of GET /v1/status, a stable contract (`meshnode status -o json`).
type Status struct {
	ID      string           `json:"id"`
	Mesh    string           `json:"mesh"`
	Addrs   []string         `json:"addrs"`
	Profile *records.Profile `json:"profile"`
	// Peers counts the other members currently alive or suspect.
	Peers     int       `json:"peers"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
}

// Peer is one element of GET /v1/peers, a stable contract (`meshnode peers -o json`).
type Peer struct {
	ID       string            `json:"id"`
	Addrs    []string          `json:"addrs"`
	State    records.PeerState `json:"state"`
	LastSeen time.Time         `json:"last_seen"`
	// RTTMs and BandwidthMbps are null until the first successful probe. Bandwidth is in
	// megabits per second.
	RTTMs         *float64   `json:"rtt_ms"`
	BandwidthMbps *float64   `json:"bandwidth_mbps"`
	ProbedAt      *time.Time `json:"probed_at,omitempty"`
	ProbeError    string     `json:"probe_error,omitempty"`
	// LinkSource is the probe behind the numbers: "dataplane" (over the tensor data
	// plane, preferred) or "libp2p".
	LinkSource string `json:"link_source,omitempty"`
	// DataAddr is where this node's data plane reached the peer: the candidate of the
	// peer's profile.data_addrs that a handshake confirmed, or "inbound" when none
	// answered and tensors go over the connection the peer opened (it is behind a NAT).
	// Empty until a data-plane probe reached it.
	DataAddr string `json:"data_addr,omitempty"`
	// Path is the kind of path tensors to the peer take now: "direct" (QUIC to a confirmed
	// address), "inbound" (QUIC the peer opened), "hole-punched" or "relayed" (libp2p
	// streams on a DCUtR connection or through a relay member), "libp2p" (streams on a
	// plain libp2p connection). Empty until something reached it.
	Path string `json:"path,omitempty"`
	// PathBytes is the payload bytes exchanged with the peer (both directions) per path kind.
	PathBytes map[string]int64 `json:"path_bytes,omitempty"`
	Profile   *records.Profile `json:"profile"`
	// ProvedGFLOPS is the compute speed the peer proved to the Raft leader's challenge
	// (docs/mesh.md, "Speed proofs"): the planner prices it at min(claimed, 4 × proved). Absent
	// before any proof (the peer is then not planned, unless it leads); 0 when it proved
	// nothing (no answer in time, or a wrong one: SpeedLie).
	ProvedGFLOPS *float64 `json:"proved_gflops,omitempty"`
	// SpeedLie says the peer's latest answer to a speed challenge was wrong: it is left
	// out of plans.
	SpeedLie bool `json:"speed_lie,omitempty"`
}

// SubmitResult is the body of a 201 answer to POST /v1/jobs.
type SubmitResult struct {
	ID string `json:"id"`
	// DatasetHolders are the members besides the submitting node that held the job's
	// dataset when the answer was sent (node Config.DatasetReplicas of them, fewer on a
	// small mesh); the job outlives its submitter once there is one.
	DatasetHolders []string `json:"dataset_holders,omitempty"`
}

// CheckpointView is one element of GET /v1/jobs/{id}/checkpoints: a manifest and whether
// its files hold every layer (weights and moments), i.e. whether a job can resume from it
// and `meshnode export` can assemble it.
type CheckpointView struct {
	records.CheckpointManifest
	Complete bool `json:"complete"`
	// Pruned says the nodes delete its files: it is older than the job's newest
	// checkpoint.keep and is not its latest complete checkpoint.
	Pruned bool `json:"pruned"`
}

// ErrorBody is the body of every non-2xx answer of the API.
type ErrorBody struct {
	Error string `json:"error"`
}

// The job views are package records': built from FSM state, which the API serves
// as it is.
type (
	// JobSummary is one element of GET /v1/jobs.
	JobSummary = records.JobSummary
	// JobDetail is GET /v1/jobs/{id}.
	JobDetail = records.JobDetail
	// RaftStatus is GET /v1/raft.
	RaftStatus = records.RaftStatus
	// PromotionResult is POST /v1/raft/promote/{id} and /v1/raft/refuse/{id}.
	PromotionResult = records.PromotionResult
)

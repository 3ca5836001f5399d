package records

// PeerState is a peer's liveness as its peer table judges it from the age of its last
// heartbeat: the `state` of GET /v1/peers.
type PeerState string

// Peer states. A peer is alive while its last heartbeat is younger than the suspect
// timeout, suspect until the dead timeout, dead after that or as soon as it announced it
// is leaving.
const (
	PeerAlive   PeerState = "alive"
	PeerSuspect PeerState = "suspect"
	PeerDead    PeerState = "dead"
)

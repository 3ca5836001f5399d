//go:build race

package parallel

import "testing"

// skipUnderRace skips a long numeric test (a convergence run, a poisoning table's bound)
// under the race detector: it runs there 10–20× slower (TestCollusionIsBoundedByHeldOutScore
// took 118 s, the five poisoning bounds 342 s of the package's 479 s) and adds no
// concurrency the short tests of the same paths do not run (TestPoisonedReplicaLeavesTheJobHealthy,
// TestPipelinedDiLoCoIsScored, TestStreamingIsScored, TestContestedNormCheckIsScored).
func skipUnderRace(t *testing.T) {
	t.Helper()
	t.Skip("a long numeric test; under -race its concurrency is covered by the short tests")
}

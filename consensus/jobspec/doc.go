// Package jobspec is the job specification a user submits: its YAML form, its defaults and
// its validation. It is pure data: no I/O beyond parsing the bytes it is given, no clock, no
// imports of meshnode packages, so the CLI, the node's HTTP API and the consensus FSM can all
// share it.
//
// The model section mirrors model.Config field by field with the same defaults (4 layers,
// d_model 128, 4 heads, context 128, vocab 256); it is a copy rather than an import because
// consensus may import only mesh. A test in cmd/meshnode checks that the two stay equal.
package jobspec

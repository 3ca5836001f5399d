//go:build !scenarios

package testnet

// scenariosEnabled: without -tags scenarios the multi-process fault scenarios skip, so that
// `go test ./...` stays within the go tool's 10-minute limit per package on a 2-core
// machine; CI runs them in a step of their own (docs/testnet.md, "Scenario tests").
const scenariosEnabled = false

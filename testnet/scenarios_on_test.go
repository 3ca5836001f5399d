//go:build scenarios

package testnet

// scenariosEnabled: built with -tags scenarios, the multi-process fault scenarios run
// (requireScenarios).
const scenariosEnabled = true

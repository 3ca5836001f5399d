// Package testbin builds the meshnode binary for tests that exec real processes (the CLI's
// and the testnet's), once per test binary, and removes it afterwards. It is imported by
// tests only and does nothing at import time.
package testbin

// Package testutil holds the helpers every package's tests share: polling a condition with
// a deadline (never sleeping to synchronise) and routing slog output to t.Log.
//
// It is imported only from _test.go files and must not import any package of ours.
package testutil

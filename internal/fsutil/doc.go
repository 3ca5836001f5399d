// Package fsutil holds the file-system steps that crash safety needs and the standard
// library leaves to the caller: making a rename or a new file's directory entry durable.
//
// It imports no package of ours, so that any package (mesh, model, api) may use it.
package fsutil

// Package dynlib loads shared libraries at run time (purego's dlopen, no cgo calls of our
// own) so that a failure carries the loader's message for that call. dlerror's message is
// the calling OS thread's: purego.Dlopen calls dlopen and then dlerror, and a goroutine
// that moved to another thread between the two read that thread's message instead (empty,
// or another goroutine's failure: the CUDA status `meshnode version` printed differed
// between two calls). Open and Sym hold the goroutine on one thread across both.
package dynlib

package api

import "runtime"

// windows reports whether file modes are meaningless here (Windows has ACLs instead).
func windows() bool { return runtime.GOOS == "windows" }

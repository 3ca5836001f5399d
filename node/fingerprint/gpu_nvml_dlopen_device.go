//go:build cgo && linux && (amd64 || arm64) && !nonvml

package fingerprint

import "bytes"

// dlopenDevice is nvmlDevice over an nvmlDevice_t handle of a loaded library. Queries
// whose function the library lacks answer nvmlErrorFunctionNotFound.
type dlopenDevice struct {
	lib *dlopenNVML
	dev uintptr
}

// nvmlStringBuffer is NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE:
// room for any name or UUID NVML returns.
const nvmlStringBuffer = 96

func (d dlopenDevice) Name() (string, nvmlReturn) { return d.str(d.lib.name) }
func (d dlopenDevice) UUID() (string, nvmlReturn) { return d.str(d.lib.uuid) }

// str calls an NVML string getter with a buffer of ours and reads no further than it.
func (d dlopenDevice) str(get func(uintptr, *byte, uint32) nvmlReturn) (string, nvmlReturn) {
	if get == nil {
		return "", nvmlErrorFunctionNotFound
	}
	var buf [nvmlStringBuffer]byte
	if ret := get(d.dev, &buf[0], uint32(len(buf))); ret != nvmlSuccess {
		return "", ret
	}
	return cString(buf[:]), nvmlSuccess
}

// cString is buf up to its first NUL, or all of buf when it has none.
func cString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}

func (d dlopenDevice) MemoryInfo() (nvmlMemory, nvmlReturn) {
	var m nvmlMemory
	if d.lib.memoryInfo == nil {
		return m, nvmlErrorFunctionNotFound
	}
	ret := d.lib.memoryInfo(d.dev, &m)
	return m, ret
}

func (d dlopenDevice) Attributes() (nvmlAttributes, nvmlReturn) {
	var a nvmlAttributes
	if d.lib.attributes == nil {
		return a, nvmlErrorFunctionNotFound
	}
	ret := d.lib.attributes(d.dev, &a)
	return a, ret
}

func (d dlopenDevice) MaxClock(clock nvmlClock) (uint32, nvmlReturn) {
	var mhz uint32
	if d.lib.maxClock == nil {
		return 0, nvmlErrorFunctionNotFound
	}
	ret := d.lib.maxClock(d.dev, uint32(clock), &mhz)
	return mhz, ret
}

func (d dlopenDevice) ComputeCapability() (major, minor int, ret nvmlReturn) {
	if d.lib.computeCap == nil {
		return 0, 0, nvmlErrorFunctionNotFound
	}
	var ma, mi int32
	ret = d.lib.computeCap(d.dev, &ma, &mi)
	return int(ma), int(mi), ret
}

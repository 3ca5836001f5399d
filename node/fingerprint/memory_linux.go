package fingerprint

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/pbnjay/memory"
)

// systemMemory reads MemTotal and MemAvailable from /proc/meminfo (MemAvailable counts
// reclaimable page cache, unlike "free"), bounded by a cgroup v2 memory limit when the
// process runs in a container.
func systemMemory() (total, available uint64) {
	total, available = readMeminfo("/proc/meminfo")
	if total == 0 {
		total, available = memory.TotalMemory(), memory.FreeMemory()
	}
	if limit := cgroupLimit(); limit > 0 && limit < total {
		used := cgroupUsage()
		total = limit
		if used < limit && limit-used < available {
			available = limit - used
		}
	}
	return total, min(available, total)
}

func readMeminfo(path string) (total, available uint64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "MemTotal:":
			total = kb << 10
		case "MemAvailable:":
			available = kb << 10
		}
	}
	return total, available
}

func cgroupLimit() uint64 { return readUintFile("/sys/fs/cgroup/memory.max") }
func cgroupUsage() uint64 { return readUintFile("/sys/fs/cgroup/memory.current") }

// readUintFile returns the number in path, or 0 if it is missing or "max".
func readUintFile(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

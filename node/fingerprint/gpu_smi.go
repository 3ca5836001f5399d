package fingerprint

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/mesh"
)

// maxSMIOutput bounds what is read of nvidia-smi's output: 64 devices of one short line.
const maxSMIOutput = 64 << 10

// smiFields are the nvidia-smi --query-gpu fields, in the order parseSMI reads them.
// compute_cap exists since driver 510; older drivers are asked without it.
var smiFields = []string{"index", "name", "uuid", "memory.total", "memory.free", "clocks.max.sm", "clocks.max.memory", "compute_cap"}

// gpusFromSMI runs command (nvidia-smi) and translates its CSV answer into the profile's GPU
// list, with the details NVML gives the in-process path except the multiprocessor count,
// which nvidia-smi does not report (left zero). No command, no driver and no device report
// no GPU and no error.
func gpusFromSMI(ctx context.Context, command string) ([]mesh.GPU, error) {
	path, err := exec.LookPath(command)
	if err != nil {
		return nil, nil
	}
	fields := smiFields
	out, err := runSMI(ctx, path, fields)
	if err != nil && bytes.Contains(out, []byte("compute_cap")) {
		fields = fields[:len(fields)-1] // a driver older than 510
		out, err = runSMI(ctx, path, fields)
	}
	if err != nil {
		if smiMeansNoGPU(out) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %w: %s", command, err, firstLine(out))
	}
	return parseSMI(out, fields)
}

// runSMI runs nvidia-smi for fields and returns its output (stdout and stderr, bounded).
func runSMI(ctx context.Context, path string, fields []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	var out boundedBuffer
	out.max = maxSMIOutput
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// smiMeansNoGPU reports whether nvidia-smi's failure says this machine has no usable
// NVIDIA GPU (no driver loaded, no device, no permission) rather than a fault.
func smiMeansNoGPU(out []byte) bool {
	for _, s := range []string{"No devices were found", "couldn't communicate with the NVIDIA driver", "Insufficient Permissions"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

// computeCapability is the form of a compute capability: major.minor.
var computeCapability = regexp.MustCompile(`^[0-9]{1,2}\.[0-9]{1,2}$`)

// parseSMI reads nvidia-smi's CSV answer (noheader, nounits) for fields. A row whose index
// or name is unusable is left out and reported; unsupported details ("[N/A]", "[Not
// Supported]") are left zero.
func parseSMI(out []byte, fields []string) (gpus []mesh.GPU, err error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord, r.TrimLeadingSpace, r.ReuseRecord = len(fields), true, true
	var errs []error
	for {
		rec, err := r.Read()
		if errors.Is(err, csv.ErrFieldCount) || errors.Is(err, csv.ErrQuote) || errors.Is(err, csv.ErrBareQuote) {
			return gpus, fmt.Errorf("nvidia-smi: unexpected output %q: %w", firstLine(out), err)
		}
		if err != nil {
			break // io.EOF, or output cut at maxSMIOutput
		}
		if len(gpus) == maxNVMLDevices {
			return gpus, fmt.Errorf("nvidia-smi: more than %d GPUs", maxNVMLDevices)
		}
		g, err := smiGPU(rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		gpus = append(gpus, g)
	}
	return gpus, errors.Join(errs...)
}

// smiGPU reads one row of smiFields (or smiFields without compute_cap).
func smiGPU(rec []string) (mesh.GPU, error) {
	idx, err := strconv.Atoi(rec[0])
	if err != nil || idx < 0 || idx >= maxNVMLDevices {
		return mesh.GPU{}, fmt.Errorf("nvidia-smi: GPU index %q", rec[0])
	}
	g := mesh.GPU{Index: idx, Name: cleanNVMLString(smiValue(rec[1])), UUID: cleanNVMLString(smiValue(rec[2]))}
	if g.Name == "" {
		return g, fmt.Errorf("nvidia-smi: GPU %d has no name", idx)
	}
	g.MemoryTotalBytes = smiUint(rec[3]) << 20 // MiB
	g.MemoryFreeBytes = min(smiUint(rec[4])<<20, g.MemoryTotalBytes)
	g.SMClockMHz = uint32(min(smiUint(rec[5]), 1<<20))
	g.MemoryClockMHz = uint32(min(smiUint(rec[6]), 1<<20))
	if len(rec) > 7 && computeCapability.MatchString(smiValue(rec[7])) {
		g.ComputeCapability = smiValue(rec[7])
	}
	return g, nil
}

// smiValue is a field's value, empty where nvidia-smi says it has none ("[N/A]", "N/A",
// "[Not Supported]", "[Unknown Error]").
func smiValue(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") || s == "N/A" {
		return ""
	}
	return s
}

// smiUint parses a non-negative integer field below 2^40 (MiB or MHz), else 0.
func smiUint(s string) uint64 {
	v, err := strconv.ParseUint(smiValue(s), 10, 64)
	if err != nil || v >= 1<<40 {
		return 0
	}
	return v
}

// firstLine is out's first line, at most 200 bytes, for error messages.
func firstLine(out []byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	return string(line[:min(len(line), 200)])
}

// boundedBuffer keeps the first max bytes written to it and discards the rest, so that a
// child process's output cannot grow without bound.
type boundedBuffer struct {
	bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

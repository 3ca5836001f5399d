package fingerprint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"

	"github.com/meshnode/meshnode/mesh"
)

// hostDetector names the machine a node runs on without revealing it: a hash of the
// machine id and the boot id (Linux: /etc/machine-id, /proc/sys/kernel/random/boot_id),
// so that every node started on one machine in one boot announces the same Host and the
// balancer prices them as sharing its cores. Where neither id can be read the hostname is
// hashed instead.
type hostDetector struct {
	read  func(path string) ([]byte, error)
	name  func() (string, error)
	label string // Config.HostLabel: hashed in place of the ids when set
}

func newHostDetector(label string) *hostDetector {
	return &hostDetector{read: os.ReadFile, name: os.Hostname, label: label}
}

func (d *hostDetector) Name() string { return "host identity" }

// hostIDFiles are the ids hashed into the host identity, in order.
var hostIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/random/boot_id"}

// Detect sets p.Host to the first 16 hex digits of SHA-256 over the ids found.
func (d *hostDetector) Detect(_ context.Context, p *mesh.Profile) error {
	h := sha256.New()
	h.Write([]byte("meshnode host v1\n"))
	found := false
	if d.label != "" {
		h.Write([]byte("label " + d.label + "\n"))
		p.Host = hex.EncodeToString(h.Sum(nil))[:16]
		return nil
	}
	for _, f := range hostIDFiles {
		if b, err := d.read(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			h.Write([]byte(strings.TrimSpace(string(b)) + "\n"))
			found = true
		}
	}
	if !found {
		name, err := d.name()
		if err != nil || name == "" {
			return errors.New("no machine id, boot id or hostname to name the host by")
		}
		h.Write([]byte("hostname " + name + "\n"))
	}
	p.Host = hex.EncodeToString(h.Sum(nil))[:16]
	return nil
}

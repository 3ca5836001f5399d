package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node"
)

type initOptions struct {
	mesh    string
	dataDir string
	port    int
	output  string
}

// initResult is `meshnode init -o json`, a stable contract.
type initResult struct {
	JoinSecret string `json:"join_secret"`
	Mesh       string `json:"mesh"`
	ID         string `json:"id"`
	Bootstrap  string `json:"bootstrap"`
	FirstJoin  string `json:"first_join"`
	OtherJoin  string `json:"other_join"`
}

func newInitCmd() *cobra.Command {
	o := initOptions{}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new mesh: a join secret and the commands that start it",
		Long: `Create a new mesh: print a fresh join secret and ready-made ` + "`meshnode join`" + ` lines for this
machine (the first node) and for every other machine. The identity key of this machine's
data directory is created if needed, so its bootstrap address is known. Nothing is stored
besides that key: keep the secret somewhere safe, and pass it to every node with
--join-secret or MESHNODE_JOIN_SECRET.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runInit(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.mesh, "mesh", "default", "mesh name")
	f.StringVar(&o.dataDir, "data-dir", node.DefaultDataDir(), "data directory of this machine's node")
	f.IntVar(&o.port, "port", mesh.DefaultPort, "port the first node will listen on (TCP and UDP)")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func runInit(cmd *cobra.Command, o initOptions) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	if o.port <= 0 || o.port > 65535 {
		return usagef("--port must be in 1-65535 (got %d)", o.port)
	}
	if err := mesh.ValidateMeshName(o.mesh); err != nil {
		return usagef("--mesh: %v", err)
	}
	secret, err := newJoinSecret()
	if err != nil {
		return err
	}
	key, _, err := mesh.LoadOrCreateIdentity(filepath.Join(o.dataDir, mesh.IdentityFile))
	if err != nil {
		return err
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return err
	}
	host := "<this-host>"
	if ip := guessLocalIPv4(); ip != "" {
		host = ip
	}
	res := initResult{JoinSecret: secret, Mesh: o.mesh, ID: id.String(),
		Bootstrap: fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", host, o.port, id)}
	portFlag := ""
	if o.port != mesh.DefaultPort {
		portFlag = fmt.Sprintf(" --listen /ip4/0.0.0.0/tcp/%d,/ip4/0.0.0.0/udp/%d/quic-v1", o.port, o.port)
	}
	res.FirstJoin = fmt.Sprintf("MESHNODE_JOIN_SECRET=%s meshnode join --mesh %s --data-dir %s%s", secret, o.mesh, o.dataDir, portFlag)
	res.OtherJoin = fmt.Sprintf("MESHNODE_JOIN_SECRET=%s meshnode join --mesh %s --bootstrap %s", secret, o.mesh, res.Bootstrap)
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "New mesh %q. Join secret (share it only with machines you trust):\n\n  %s\n\n", o.mesh, secret)
	fmt.Fprintf(w, "Start the first node on this machine:\n\n  %s\n\n", res.FirstJoin)
	fmt.Fprintf(w, "Then on every other machine:\n\n  %s\n\n", res.OtherJoin)
	fmt.Fprintf(w, "Open TCP and UDP port %d on this machine. If %s is not the address the others reach\n", o.port, host)
	fmt.Fprintf(w, "it at, use the right one (`meshnode status` lists the node's addresses once it runs).\n")
	return nil
}

// newJoinSecret returns 256 random bits, URL-safe base64 (43 characters).
func newJoinSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate join secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// guessLocalIPv4 returns the first private or public IPv4 address of an interface that is
// up, or "" if there is none.
func guessLocalIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip := ipn.IP.To4(); ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			return ip.String()
		}
	}
	return ""
}

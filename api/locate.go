package api

import (
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables a client reads (the CLI maps its flags onto them).
const (
	// EnvAPI is the API address, as --api.
	EnvAPI = "MESHNODE_API"
	// EnvDataDir is the node's data directory, as --data-dir.
	EnvDataDir = "MESHNODE_DATA_DIR"
	// EnvToken is the API token itself, for clients that cannot read the data directory
	// (a container, a notebook); never a flag, so it does not show in `ps`.
	EnvToken = "MESHNODE_TOKEN"
)

// Locate builds the Config of a client of the node that owns dataDir: addr when given,
// else the address in the RuntimeFile of the node running there (whose ID the node must
// then prove); token when given (MESHNODE_TOKEN), else the node's TokenFile, which is only
// used with a loopback address: the token of a local node is not used for another machine
// because of a mistyped --api. Whatever the address, the client makes the process there
// prove it holds the token before sending anything (auth.go).
//
// Without addr, a RuntimeFile whose process is gone is a *StaleError, and no RuntimeFile
// at all an error wrapping ErrNoNode: the data dir's token is never used for DefaultAddr,
// where any local user may listen. Only a token given directly goes to DefaultAddr then
// (a container whose data dir is elsewhere). A missing token file is not an error (the
// node will answer 401 and the message says where the token comes from); an unreadable
// or unsafe token file is.
func Locate(addr, dataDir, token string) (Config, error) {
	cfg := Config{Addr: addr, Token: token}
	if token != "" {
		cfg.TokenSource = EnvToken
	}
	if dataDir == "" {
		return cfg, nil
	}
	if cfg.Addr == "" {
		info, err := RunningNode(dataDir)
		switch {
		case err == nil:
			cfg.Addr, cfg.NodeID = info.API, info.ID
		case token != "" && !isStale(err):
			return cfg, nil // the data dir is not this client's to read (a container)
		default:
			return cfg, err
		}
	}
	if cfg.Token == "" && isLoopback(cfg.Addr) {
		tok, err := ReadToken(dataDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return cfg, err
		}
		cfg.Token, cfg.TokenSource = tok, filepath.Join(dataDir, TokenFile)
	}
	return cfg, nil
}

func isStale(err error) bool {
	var stale *StaleError
	return errors.As(err, &stale)
}

// isLoopback reports whether addr (host:port or URL; empty is DefaultAddr) names this
// machine.
func isLoopback(addr string) bool {
	if addr == "" {
		return true
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/node"
)

// apiOptions is how every command that talks to the local node finds it and proves it may:
// --api (env MESHNODE_API) and --data-dir (env MESHNODE_DATA_DIR), whose runtime file
// names the running node's API (refused when its process is gone) and whose api.token is
// the key, or MESHNODE_TOKEN. The client never sends the token: the process at the address
// must first prove it holds it, then each request is signed with it (api/auth.go).
type apiOptions struct {
	addr    string
	dataDir string
}

// addAPIFlags registers --api and --data-dir on cmd.
func addAPIFlags(cmd *cobra.Command, o *apiOptions) {
	cmd.Flags().StringVar(&o.addr, "api", "", "address of the local node's HTTP API (default: the node running in --data-dir; "+api.DefaultAddr+" only with $"+api.EnvToken+") [$"+api.EnvAPI+"]")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", node.DefaultDataDir(), "the local node's data directory: the API address and token are read from it [$"+api.EnvDataDir+"]")
}

// client builds the API client: a flag given on the command line wins over its environment
// variable; the token is MESHNODE_TOKEN, else the one in the data directory.
func (o *apiOptions) client(cmd *cobra.Command) (*api.Client, error) {
	addr := flagOrEnv(cmd, "api", o.addr, api.EnvAPI)
	dataDir := flagOrEnv(cmd, "data-dir", o.dataDir, api.EnvDataDir)
	cfg, err := api.Locate(addr, dataDir, os.Getenv(api.EnvToken))
	if err != nil {
		return nil, err
	}
	c, err := api.New(cfg)
	if err != nil {
		return nil, usageError{err: err}
	}
	return c, nil
}

func flagOrEnv(cmd *cobra.Command, name, value, env string) string {
	if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
		return value
	}
	if v, ok := os.LookupEnv(env); ok {
		return v
	}
	return value
}

// jobErr turns an API error about a job into the CLI's error: a missing job is bad input
// (exit 2), anything else exits 1.
func jobErr(id string, err error) error {
	if api.StatusCode(err) == http.StatusNotFound {
		return usagef("job %s not found (see `meshnode jobs`)", id)
	}
	return err
}

func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

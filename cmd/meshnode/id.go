package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node"
)

type idOptions struct {
	dataDir string
	output  string
}

func newIDCmd() *cobra.Command {
	o := idOptions{}
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print this node's peer ID (its identity in the mesh)",
		Long: `Print the peer ID of the identity key in the data directory. The peer ID names the node
everywhere: in peer tables, plans, logs and --allow lists.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			path := filepath.Join(o.dataDir, mesh.IdentityFile)
			key, err := mesh.LoadIdentity(path)
			if errors.Is(err, fs.ErrNotExist) {
				return usagef("no identity in %s: run `meshnode init` or `meshnode join` with this --data-dir first", o.dataDir)
			}
			if err != nil {
				return err
			}
			id, err := peer.IDFromPrivateKey(key)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]string{"id": id.String()})
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.dataDir, "data-dir", node.DefaultDataDir(), "node data directory")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

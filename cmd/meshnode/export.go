package main

import (
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

type exportOptions struct {
	api  apiOptions
	out  string
	step int
}

func newExportCmd() *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export ID --out model.safetensors",
		Short: "Assemble a job's checkpoint into one GPT-2-named safetensors file",
		Long: `Export assembles the latest complete checkpoint of a job (or --step N) from its stages'
files, fetched by hash from the nodes that hold them, into one safetensors file with GPT-2
tensor names and the model's shape in its metadata: meshnode generate loads it, and so does
any GPT-2 implementation. A job trained with data.tokenizer also gets that tokenizer.json
written beside the file, where generate finds it.`,
		Example: `  meshnode export 3f9a1c2e7b4d --out model.safetensors
  meshnode generate --checkpoint model.safetensors --prompt "func main() {"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.out == "" {
				return usagef("--out is required")
			}
			if err := checkWritableDir(filepath.Dir(o.out)); err != nil {
				return usagef("--out: %v", err)
			}
			c, err := o.api.client(cmd)
			if err != nil {
				return err
			}
			raw, err := c.Export(cmd.Context(), args[0], o.step)
			if err != nil {
				return jobErr(args[0], err)
			}
			if _, err := model.DecodeSafetensors(raw); err != nil {
				return fmt.Errorf("export of job %s: the node sent an unreadable file: %w", args[0], err)
			}
			if err := model.WriteFileAtomic(o.out, raw); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s)\n", o.out, humanBytes(int64(len(raw))))
			return exportTokenizer(cmd, c, args[0], filepath.Join(filepath.Dir(o.out), TokenizerFile))
		},
	}
	addAPIFlags(cmd, &o.api)
	cmd.Flags().StringVar(&o.out, "out", "", "the safetensors file to write (required)")
	cmd.Flags().IntVar(&o.step, "step", -1, "export this checkpoint step instead of the latest complete one")
	return cmd
}

// exportTokenizer writes the job's tokenizer to path when it has one (a 404 means it
// trained on bytes or .bin ids: nothing to write).
func exportTokenizer(cmd *cobra.Command, c *api.Client, id, path string) error {
	tok, err := c.Tokenizer(cmd.Context(), id)
	if api.StatusCode(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return jobErr(id, err)
	}
	if _, err := tokenizer.Parse(tok, "the tokenizer of job "+id); err != nil {
		return fmt.Errorf("export of job %s: the node sent an unreadable tokenizer: %w", id, err)
	}
	if err := model.WriteFileAtomic(path, tok); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", path)
	return nil
}

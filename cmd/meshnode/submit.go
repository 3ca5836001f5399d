package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

type submitOptions struct {
	api      apiOptions
	dataRoot string
	wait     bool
	poll     time.Duration
	output   string
}

func newSubmitCmd() *cobra.Command {
	o := &submitOptions{}
	cmd := &cobra.Command{
		Use:   "submit JOB.yaml",
		Short: "Submit a training job to the mesh",
		Long: `Validate a job spec (docs/jobspec.md) and submit it through the local node, which
forwards it to the Raft leader. Every bad field is reported at once and the command exits 2
without contacting the node. Relative data paths are resolved against the spec's directory
and must exist on this machine. "-" reads the spec from stdin.

Local data (data.source, data.train, data.val) must be regular files under the data root:
the directory you run the command in, unless --data-root names another, or a directory the
node was started with (meshnode join --data-root). The node reads them; other paths
(/etc/passwd, devices) are refused.

With --wait, the command follows the job until it is done (exit 0), failed or cancelled
(exit 1). Until the training engine runs jobs, a job stays "submitted".`,
		Example: `  meshnode submit job.yaml
  meshnode submit job.yaml --wait
  meshnode submit job.yaml -o json   # {"id":"...","dataset_holders":["12D3Koo…"]}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	addAPIFlags(cmd, &o.api)
	cmd.Flags().StringVar(&o.dataRoot, "data-root", "", "the directory local data paths must lie under (default: the working directory) [$MESHNODE_DATA_ROOT]")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "follow the job until it finishes")
	cmd.Flags().DurationVar(&o.poll, "poll", time.Second, "how often --wait asks for the job's status")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *submitOptions) run(cmd *cobra.Command, path string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	spec, err := loadSpec(path, cmd.InOrStdin())
	if err != nil {
		return err
	}
	root, err := o.root(cmd)
	if err != nil {
		return err
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	body, err := spec.Document()
	if err != nil {
		return err
	}
	res, err := c.SubmitJob(cmd.Context(), body, root)
	if err != nil {
		if api.StatusCode(err) == http.StatusBadRequest {
			return usagef("%s: %w", path, err)
		}
		return fmt.Errorf("submit %s: %w", path, err)
	}
	w := cmd.OutOrStdout()
	if o.output == "json" {
		if err := writeJSON(w, res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "submitted job %s (%s)", res.ID, spec.Name)
		if n := len(res.DatasetHolders); n > 0 {
			fmt.Fprintf(w, "; its dataset is on %d other member(s)", n)
		}
		fmt.Fprintln(w)
	}
	if !o.wait {
		return nil
	}
	return o.follow(cmd.Context(), c, res.ID, w)
}

// root is the data root sent with the job: --data-root (or $MESHNODE_DATA_ROOT), else the
// working directory, as an absolute path.
func (o *submitOptions) root(cmd *cobra.Command) (string, error) {
	dir := flagOrEnv(cmd, "data-root", o.dataRoot, "MESHNODE_DATA_ROOT")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("working directory: %w", err)
		}
		return wd, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usagef("--data-root %q: %v", dir, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", usagef("--data-root %q: not a directory", dir)
	}
	return abs, nil
}

// loadSpec reads, parses and validates a spec, and resolves its data paths against the
// spec's directory. Every problem is a usage error naming the file and the field.
func loadSpec(path string, stdin io.Reader) (jobspec.Spec, error) {
	var b []byte
	var err error
	dir := filepath.Dir(path)
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, jobspec.MaxSpecBytes+1))
		dir = "."
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return jobspec.Spec{}, usagef("read job spec: %v", err)
	}
	spec, err := jobspec.Parse(b)
	if err != nil {
		return spec, usagef("%s: %w", path, err)
	}
	var errs []error
	resolve := func(field string, p *string) {
		if *p == "" || strings.HasPrefix(*p, "builtin:") {
			return
		}
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
		if _, err := os.Stat(*p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s does not exist on this machine", field, *p))
		}
	}
	resolve("data.source", &spec.Data.Source)
	resolve("data.train", &spec.Data.Train)
	resolve("data.val", &spec.Data.Val)
	resolve("data.tokenizer", &spec.Data.Tokenizer)
	resolve("model.init", &spec.Model.Init)
	if len(errs) > 0 {
		return spec, usagef("%s: %w", path, errors.Join(errs...))
	}
	if spec.Model.Init != "" {
		if field := modelFieldBesideInit(b); field != "" {
			return spec, usagef("%s: model.%s: the model is model.init's config.json; leave the other model fields out (a Llama's context may be set shorter)", path, field)
		}
		// The node reads the directory whole; its config.json is checked here first.
		if _, err := model.ReadHFConfig(spec.Model.Init); err != nil {
			return spec, usagef("%s: model.init: %v", path, err)
		}
	}
	return spec, nil
}

// follow polls the job until it reaches a terminal status, printing each change.
// submitApplyGrace is how long --wait takes "not found" for a job that this node's
// replica has not applied yet (submitted through a follower).
const submitApplyGrace = 15 * time.Second

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (o *submitOptions) follow(ctx context.Context, c *api.Client, id string, w io.Writer) error {
	var last string
	// The write went to the Raft leader; this node's replica applies it a moment later.
	applied := time.Now().Add(submitApplyGrace)
	for {
		d, err := c.Job(ctx, id, false)
		if api.StatusCode(err) == http.StatusNotFound && time.Now().Before(applied) {
			if err := sleepCtx(ctx, o.poll); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return jobErr(id, err)
		}
		line := string(d.Status)
		if d.Progress.UpdatedAt != nil {
			line = fmt.Sprintf("%s  step %d/%d  loss %.4f  %.0f tok/s", d.Status, d.Progress.Step, d.Progress.Steps, d.Progress.Loss, d.Progress.TokensPerSec)
		}
		if line != last && o.output != "json" {
			fmt.Fprintf(w, "job %s: %s\n", id, line)
		}
		last = line
		if d.Status.Terminal() {
			if o.output == "json" {
				if err := writeJSON(w, map[string]any{"id": id, "status": d.Status}); err != nil {
					return err
				}
			}
			if d.Status != consensus.JobDone {
				return fmt.Errorf("job %s %s", id, d.Status)
			}
			return nil
		}
		t := time.NewTimer(o.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// modelFieldBesideInit is the first field the spec's model section writes besides init
// and context ("" when none): the submitting node replaces the model with config.json's,
// so such a field would be silently dropped.
func modelFieldBesideInit(spec []byte) string {
	var doc struct {
		Model map[string]yaml.Node `yaml:"model"`
	}
	if yaml.Unmarshal(spec, &doc) != nil {
		return ""
	}
	var keys []string
	for k := range doc.Model {
		if k != "init" && k != "context" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

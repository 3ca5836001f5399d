package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// chromiumPath finds a Chromium (Debian's package, which .ci/run installs) or skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on this machine (apt-get install chromium): the dashboard's browser test did not run")
	return ""
}

// newBrowser starts a headless Chromium for the test's lifetime.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 1100),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() }) // stops the browser process
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return bctx
}

// browserEval evaluates expr in the page with a bounded wait.
func browserEval(ctx context.Context, expr string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate(expr, out))
}

// screenshot saves the page as a PNG among the test's artifacts (go test -artifacts keeps
// them; README's picture comes from here).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(sctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// TestDashboardInABrowser drives the dashboard in headless Chromium against two
// in-process nodes training a job: the layer map names both nodes, the loss curve gains
// points while the page polls, and the page's cancel button cancels the job.
func TestDashboardInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser and trains on two nodes")
	}
	chromium := chromiumPath(t)
	nodes := startEngineMesh(t, 2)
	spec := jobspec.DefaultSpec()
	spec.Name = "dashboard"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "func (n *Node) Start(ctx context.Context) error { return nil }\n", 800)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 100000, 8, jobspec.Fixed(2), 20, 2
	spec.Parallel.Replicas = jobspec.Fixed(1)
	spec.Placement.Strategy = jobspec.StrategyEven // one pipeline over both nodes
	id := submitThroughAPI(t, nodes[0], spec)

	page := newBrowser(t, chromium)
	url := nodes[0].DashboardURL()
	nctx, cancel := context.WithTimeout(page, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(nctx, chromedp.Navigate(url), chromedp.WaitVisible("#job", chromedp.ByID)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	want := []string{nodes[0].ID().String(), nodes[1].ID().String()}
	slices.Sort(want)
	testutil.WaitForErr(t, 90*time.Second, func() error {
		var shown []string
		if err := browserEval(page, `[...new Set([...document.querySelectorAll("#layer-map [data-node]")].map(e => e.dataset.node))].sort()`, &shown); err != nil {
			return err
		}
		if !slices.Equal(shown, want) {
			return fmt.Errorf("the layer map names %v, want both nodes %v", shown, want)
		}
		return nil
	})
	trainPoints := func() (n int) {
		_ = browserEval(page, `Number((document.querySelector("#loss-chart polyline.train") || {dataset: {points: 0}}).dataset.points)`, &n)
		return n
	}
	var first int
	testutil.WaitFor(t, 90*time.Second, "the loss curve to show training losses", func() bool { first = trainPoints(); return first > 0 })
	testutil.WaitFor(t, 90*time.Second, "the loss curve to gain points", func() bool { return trainPoints() > first })
	screenshot(t, page, "dashboard-running.png")

	// Cancel from the page: the button takes two clicks.
	cctx, ccancel := context.WithTimeout(page, 20*time.Second)
	defer ccancel()
	if err := chromedp.Run(cctx, chromedp.Click("#cancel", chromedp.ByID), chromedp.Click("#cancel", chromedp.ByID)); err != nil {
		t.Fatalf("click cancel: %v", err)
	}
	testutil.WaitFor(t, 30*time.Second, "the job to be cancelled from the page", func() bool {
		j, _, err := nodes[1].Consensus().Job(context.Background(), id, false)
		return err == nil && j.Status == consensus.JobCancelled
	})
	testutil.WaitFor(t, 30*time.Second, "the page to show the job cancelled", func() bool {
		var s string
		return browserEval(page, `document.getElementById("job-status").textContent`, &s) == nil && s == string(consensus.JobCancelled)
	})
	screenshot(t, page, "dashboard-cancelled.png")
}

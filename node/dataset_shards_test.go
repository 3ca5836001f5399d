package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/scheduler"
)

// byteEncoder encodes text as its bytes (vocabulary 256), enough to shard a corpus.
type byteEncoder struct{}

func (byteEncoder) AppendEncode(dst []uint32, text []byte) []uint32 {
	for _, b := range text {
		dst = append(dst, uint32(b))
	}
	return dst
}

func (byteEncoder) VocabSize() int { return 256 }

// shardedCorpus writes docs documents of about 2 KB into a text directory under dir and
// shards them at shardTokens ids per shard; it returns the corpus directory and manifest.
func shardedCorpus(t *testing.T, dir string, docs, shardTokens int) (string, *model.ShardManifest) {
	t.Helper()
	src := filepath.Join(dir, "docs")
	os.Mkdir(src, 0o755)
	for k := range docs {
		text := strings.Repeat(fmt.Sprintf("document %d says hello to shard land. ", k), 50)
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("%03d.txt", k)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "shards")
	m, err := model.WriteShards(out, src, model.TextOptions{Encoder: byteEncoder{}, EndOfText: -1}, shardTokens)
	if err != nil {
		t.Fatal(err)
	}
	return out, m
}

// TestShardedDatasetFetchesOnlyItsReplicasShards: a sharded corpus submitted as a job is
// one blob per shard plus a manifest; a node loading replica r of R fetches the manifest,
// its replica's training shards and the validation shards, nothing else (its blob counter
// says so to the byte), and reads exactly those shards' ids.
func TestShardedDatasetFetchesOnlyItsReplicasShards(t *testing.T) {
	a, b := dataNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	corpus, cm := shardedCorpus(t, dir, 60, 4096)
	data, vocab, err := a.PublishJobData(ctx, jobspec.Data{Source: corpus}, 256, dir)
	if err != nil {
		t.Fatal(err)
	}
	if vocab != 256 || data.Blob == "" || data.TrainShards != len(cm.Train) || len(cm.Train) < 6 {
		t.Fatalf("published %+v vocab %d, want a manifest blob and %d training shards", data, vocab, len(cm.Train))
	}
	whole, _ := a.Blobs().Store().Manifest(data.Blob)
	size := func(s model.ShardRef) int64 { return 2 * int64(s.Tokens) }
	var total, val int64 = whole.Size, 0
	for _, s := range cm.Train {
		total += size(s)
	}
	for _, s := range cm.Val {
		val += size(s)
	}
	total += val
	const R = 3
	shards := model.ReplicaShards(len(cm.Train), 1, R)
	want := whole.Size + val
	var ids []int32
	for _, i := range shards {
		want += size(cm.Train[i])
		ids = append(ids, shardIDs(t, corpus, cm.Train[i])...)
	}
	before := b.Blobs().Stats().BytesFetched
	ds, err := b.LoadDatasetShards(ctx, data.Blob, shards, []peer.ID{a.ID()})
	if err != nil {
		t.Fatal(err)
	}
	fetched := b.Blobs().Stats().BytesFetched - before
	if fetched != want {
		t.Fatalf("replica 1 of %d fetched %d bytes, want %d (manifest, its %d training shards, the validation shards)", R, fetched, want, len(shards))
	}
	t.Logf("replica 1 of %d fetched %d of the dataset's %d bytes (%.0f%%): %d of %d training shards and %d validation shards",
		R, fetched, total, 100*float64(fetched)/float64(total), len(shards), len(cm.Train), len(cm.Val))
	if got := tokensOf(ds.Train); !equalIDs(got, ids) {
		t.Fatalf("replica 1 reads %d ids, not its shards' %d", len(got), len(ids))
	}
	for _, i := range []int{0, 2} { // a shard of another replica is not here
		if b.Blobs().Has(blobOfShard(t, a, data.Blob, i)) {
			t.Errorf("b holds training shard %d, which replica 1 does not train on", i)
		}
	}
}

// shardIDs reads a shard file's ids.
func shardIDs(t *testing.T, dir string, s model.ShardRef) []int32 {
	b, err := os.ReadFile(filepath.Join(dir, s.Hash+".tok"))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(b)/2)
	for i := range out {
		out[i] = int32(b[2*i]) | int32(b[2*i+1])<<8
	}
	return out
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// blobOfShard is the blob of training shard i in manifest blob id, read on n.
func blobOfShard(t *testing.T, n *Node, id string, i int) string {
	m, err := n.data.readJobShards(id)
	if err != nil || m == nil {
		t.Fatalf("read the shard manifest: %v", err)
	}
	return m.Train[i].Blob
}

// TestShardedDatasetRefusesAChangedShard: a shard file whose bytes are not what its name
// and the manifest say is refused at submit, naming it, and leaves no blob behind.
func TestShardedDatasetRefusesAChangedShard(t *testing.T) {
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	n := startNode(t, cfg)
	dir := t.TempDir()
	corpus, cm := shardedCorpus(t, dir, 40, 4096)
	p := filepath.Join(corpus, cm.Train[2].Hash+".tok")
	b, _ := os.ReadFile(p)
	b[10] ^= 1
	os.WriteFile(p, b, 0o644)
	held, _ := n.Blobs().Store().List()
	_, _, err := n.PublishJobData(context.Background(), jobspec.Data{Source: corpus}, 256, dir)
	if !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("changed shard: got %v, want a refusal naming %s", err, p)
	}
	if after, _ := n.Blobs().Store().List(); len(after) != len(held)+2 {
		// shards 0 and 1 were published before shard 2 was refused; shard 2's is removed
		t.Errorf("blobs %d → %d, want the two good shards only", len(held), len(after))
	}
	_, _, err = n.PublishJobData(context.Background(), jobspec.Data{Source: corpus}, 100, dir)
	if !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), "set model.vocab to at least 256") {
		t.Fatalf("a vocabulary past model.vocab: %v", err)
	}
}

// FuzzDecodeJobShards: whatever bytes a peer's manifest blob holds, decoding returns an
// error or a manifest whose every entry is within bounds; it never panics.
func FuzzDecodeJobShards(f *testing.F) {
	h := strings.Repeat("ab", 32)
	valid, _ := json.Marshal(jobShards{Format: jobShardsFormat, Source: "/c", Vocab: 256, Tokenizer: h,
		Train: []shardBlobRef{{ShardRef: model.ShardRef{Hash: h, Tokens: 10}, Blob: h}},
		Val:   []shardBlobRef{{ShardRef: model.ShardRef{Hash: h, Tokens: 3}, Blob: h}}})
	f.Add(valid)
	f.Add([]byte(`{"format":"meshnode-job-shards/1","vocab":0}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeJobShards(b)
		if err != nil {
			return
		}
		if m.Vocab < 1 || m.Vocab > 1<<16 || len(m.Train) < 1 || len(m.Val) < 1 {
			t.Fatalf("accepted %+v", m)
		}
		for _, s := range append(m.Train, m.Val...) {
			if s.Tokens < 1 || s.Tokens > maxShardTokens || len(s.Hash) != 64 {
				t.Fatalf("accepted entry %+v", s)
			}
		}
	})
}

// TestShardedJobTrainsEachReplicaOnItsShards: a job whose data.source is a sharded corpus
// (tokenizer shard's output, with its tokenizer.json) trains two DiLoCo replicas on a
// three-node mesh: the plan records each replica's training shards, the job finishes with
// its validation loss falling, each node of the plan holds its replica's shards, and GET
// tokenizer answers the corpus's tokenizer.json from the manifest, without the shards.
func TestShardedJobTrainsEachReplicaOnItsShards(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model on three in-process nodes")
	}
	nodes := startEngineMesh(t, 3)
	dir := t.TempDir()
	docs, _, tokPath, tok := textCorpus(t, dir)
	eot, _ := tok.EndOfText()
	corpus := filepath.Join(dir, "shards")
	cm, err := model.WriteShards(corpus, docs, model.TextOptions{Encoder: tok, EndOfText: int(eot)}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := os.ReadFile(tokPath)
	os.WriteFile(filepath.Join(corpus, "tokenizer.json"), tb, 0o644)
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: tok.VocabSize()}
	spec.Data = jobspec.Data{Source: corpus}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 12, 8, jobspec.Fixed(1), 6, 2
	spec.Parallel.Replicas, spec.Parallel.Stages, spec.Parallel.Sync, spec.Parallel.InnerSteps = jobspec.Fixed(2), jobspec.Fixed(1), jobspec.SyncDiLoCo, 4
	// Audits cannot recompute a replica's work on shards only it holds: a pinned rate is
	// refused once the submission finds the corpus sharded, naming the field (auto
	// resolves to none: the job below).
	audited := spec
	audited.Parallel.Audit = jobspec.Pinned(1)
	body, _ := audited.Document()
	if _, err := testClient(t, nodes[1]).Submit(context.Background(), body, os.TempDir()); err == nil || !strings.Contains(err.Error(), "parallel.audit: needs a dataset every replica holds whole") {
		t.Fatalf("a sharded job with parallel.audit 1: %v, want it refused naming parallel.audit", err)
	}
	id := submitThroughAPI(t, nodes[1], spec)
	var job consensus.Job
	testutil.WaitFor(t, 90*time.Second, "the job to finish", func() bool {
		var err error
		job, _, err = nodes[0].Consensus().Job(context.Background(), id, false)
		return err == nil && job.Status.Terminal()
	})
	if job.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", job.Status, job.Events)
	}
	if job.Spec.Data.TrainShards != len(cm.Train) {
		t.Fatalf("data.train_shards %d, want %d", job.Spec.Data.TrainShards, len(cm.Train))
	}
	var jp scheduler.JobPlan
	json.Unmarshal(job.CurrentPlan().Plan, &jp)
	if len(jp.Replicas) != 2 || len(jp.DataShards) != 2 {
		t.Fatalf("plan %+v, data shards %v: want two replicas, each with its shards", jp.Replicas, jp.DataShards)
	}
	byID := map[string]*Node{}
	for _, n := range nodes {
		byID[n.ID().String()] = n
	}
	for r, stages := range jp.Replicas {
		n := byID[stages[0].Node]
		for _, i := range jp.DataShards[r] {
			if !n.Blobs().Has(blobOfShard(t, n, job.Spec.Data.Blob, i)) {
				t.Errorf("replica %d's node lacks its training shard %d", r, i)
			}
		}
	}
	// --dataset-replicas 1: one member besides the submitter holds the manifest and every
	// shard (a worker alone holds its replica's half), pulled before the submit answered.
	all := append([]string{job.Spec.Data.Blob}, nodes[1].data.parts(job.Spec.Data.Blob)...)
	if !slices.ContainsFunc(nodes, func(n *Node) bool {
		return n != nodes[1] && !slices.ContainsFunc(all, func(id string) bool { return !n.Blobs().Has(id) })
	}) {
		t.Errorf("no member besides the submitter holds the whole sharded dataset (%d blobs)", len(all))
	}
	var vals []float64
	for _, s := range job.Progress {
		if s.ValLoss != nil {
			vals = append(vals, *s.ValLoss)
		}
	}
	if len(vals) < 2 || !(vals[len(vals)-1] < vals[0]) {
		t.Fatalf("validation losses %v: none, or not falling", vals)
	}
	t.Logf("data shards %v of %d; validation loss %.3f → %.3f", jp.DataShards, len(cm.Train), vals[0], vals[len(vals)-1])
	got, err := testClient(t, nodes[0]).Tokenizer(context.Background(), id)
	if err != nil || string(got) != string(tb) {
		t.Fatalf("GET tokenizer: %d bytes, %v; want the corpus's %d", len(got), err, len(tb))
	}
}

// BenchmarkShardedFetch measures what one node of replica R−1 of R fetches of a sharded
// job dataset (about 13 MB: 64 documents of 200 KB, 256 Ki-token shards), against the
// whole dataset, for R = 1, 2, 4, 8: a fresh pair of nodes per R.
//
//	go test ./node -run XXX -bench ShardedFetch -benchtime 1x
func BenchmarkShardedFetch(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "docs")
	os.Mkdir(src, 0o755)
	for k := range 64 {
		text := strings.Repeat(fmt.Sprintf("document %d, line of a longer corpus for the shards. ", k), 3800)
		os.WriteFile(filepath.Join(src, fmt.Sprintf("%03d.txt", k)), []byte(text), 0o644)
	}
	corpus := filepath.Join(dir, "shards")
	cm, err := model.WriteShards(corpus, src, model.TextOptions{Encoder: byteEncoder{}, EndOfText: -1}, 256<<10)
	if err != nil {
		b.Fatal(err)
	}
	for _, R := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("R=%d", R), func(b *testing.B) {
			for range b.N {
				cfg := testConfig(b)
				cfg.Consensus.Disabled = true
				a := startNode(b, cfg)
				cfg = testConfig(b, a.Status().Addrs...)
				cfg.Consensus.Disabled = true
				n := startNode(b, cfg)
				ctx := context.Background()
				data, _, err := a.PublishJobData(ctx, jobspec.Data{Source: corpus}, 256, dir)
				if err != nil {
					b.Fatal(err)
				}
				var total int64
				for _, id := range append([]string{data.Blob}, a.data.parts(data.Blob)...) {
					m, _ := a.Blobs().Store().Manifest(id)
					total += m.Size
				}
				if _, err := n.LoadDatasetShards(ctx, data.Blob, model.ReplicaShards(len(cm.Train), R-1, R), []peer.ID{a.ID()}); err != nil {
					b.Fatal(err)
				}
				fetched := n.Blobs().Stats().BytesFetched
				b.ReportMetric(float64(fetched), "fetched-bytes")
				b.ReportMetric(float64(total), "dataset-bytes")
				b.ReportMetric(float64(fetched)/float64(total), "fraction")
			}
		})
	}
}

// TestShardOfLiveDatasetIsAccepted: a member asked to hold a blob as part of a sharded
// dataset accepts it only when a live job's manifest, which it already holds, lists it:
// not a blob the manifest does not list, not for a finished job, not before it holds the
// manifest.
func TestShardOfLiveDatasetIsAccepted(t *testing.T) {
	a, b := dataNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	corpus, _ := shardedCorpus(t, dir, 40, 4096)
	data, _, err := a.PublishJobData(ctx, jobspec.Data{Source: corpus}, 256, dir)
	if err != nil {
		t.Fatal(err)
	}
	shard := a.data.parts(data.Blob)[1]
	job := consensus.Job{ID: "j", Status: consensus.JobRunning, Spec: jobspec.DefaultSpec()}
	job.Spec.Data = data
	jobs := []consensus.Job{job}
	if b.data.partOfLiveDataset(jobs, shard) {
		t.Fatal("accepted a shard before holding its manifest")
	}
	if err := b.Blobs().Fetch(ctx, data.Blob, []peer.ID{a.ID()}); err != nil {
		t.Fatal(err)
	}
	if !b.data.partOfLiveDataset(jobs, shard) {
		t.Fatal("refused a shard the live job's manifest lists")
	}
	if b.data.partOfLiveDataset(jobs, strings.Repeat("cd", 32)) || b.data.partOfLiveDataset(jobs, data.Blob) {
		t.Fatal("accepted a blob the manifest does not list as a part")
	}
	jobs[0].Status = consensus.JobDone
	if b.data.partOfLiveDataset(jobs, shard) {
		t.Fatal("accepted a shard of a finished job")
	}
}

// TestTextShardedAtSubmit: a text source with data.tokenizer and data.shard_tokens is
// encoded into shards by the submitting node (the same shards `tokenizer shard` writes)
// and shipped shard by shard, with the tokenizer; a replica's node reads exactly its
// shards' ids. The temporary shard directory is gone afterwards.
func TestTextShardedAtSubmit(t *testing.T) {
	a, b := dataNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	docs, _, tokPath, tok := textCorpus(t, dir)
	data, vocab, err := a.PublishJobData(ctx, jobspec.Data{Source: docs, Tokenizer: tokPath, ShardTokens: 1024}, 0, dir)
	if err != nil {
		t.Fatal(err)
	}
	eot, _ := tok.EndOfText()
	local := filepath.Join(t.TempDir(), "shards")
	cm, err := model.WriteShards(local, docs, model.TextOptions{Encoder: tok, EndOfText: int(eot)}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if vocab != tok.VocabSize() || data.TrainShards != len(cm.Train) || data.TrainShards < 4 {
		t.Fatalf("published %+v vocab %d; want %d training shards, vocabulary %d", data, vocab, len(cm.Train), tok.VocabSize())
	}
	shards := model.ReplicaShards(len(cm.Train), 0, 2)
	ds, err := b.LoadDatasetShards(ctx, data.Blob, shards, []peer.ID{a.ID()})
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	for _, i := range shards {
		want = append(want, shardIDs(t, local, cm.Train[i])...)
	}
	if got := tokensOf(ds.Train); !equalIDs(got, want) {
		t.Fatalf("replica 0 reads %d ids, want its %d shards' %d", len(got), len(shards), len(want))
	}
	tb, _ := os.ReadFile(tokPath)
	if string(ds.Tokenizer) != string(tb) {
		t.Error("the tokenizer did not travel with the shards")
	}
	if left, _ := filepath.Glob(filepath.Join(a.cfg.DataDir, "shard-at-submit-*")); len(left) != 0 {
		t.Errorf("temporary shard directories left: %v", left)
	}
	if _, _, err := a.PublishJobData(ctx, jobspec.Data{Source: docs, Tokenizer: tokPath, ShardTokens: 1024}, 300, dir); !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), "model.vocab: 300 does not match") {
		t.Fatalf("a model.vocab other than the tokenizer's: %v", err)
	}
}

package node

import (
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/mesh/blob"
)

// blobCollector exports the blob store's contents and the blob service's counters at
// scrape time. The store's size is read from its directory, so it includes blobs another
// process sharing the directory stored.
type blobCollector struct {
	n       *Node
	removed *atomic.Int64 // blobs the node's runner deleted (checkpoint pruning)

	stored, storedBytes, fetches, fetchedBytes *prometheus.Desc
	served, chunks, bad, dropped, removals     *prometheus.Desc
}

func newBlobCollector(n *Node, removed *atomic.Int64) *blobCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("meshnode_blob_"+name, help, nil, nil)
	}
	return &blobCollector{
		n: n, removed: removed,
		stored:       d("stored", "Complete blobs in this node's store."),
		storedBytes:  d("stored_bytes", "Bytes of the complete blobs in this node's store (data, without manifests)."),
		fetches:      d("fetches_total", "Whole blobs fetched from peers, verified and stored."),
		fetchedBytes: d("fetched_bytes_total", "Bytes of the blobs fetched from peers."),
		served:       d("chunks_served_total", "Chunks this node sent to peers."),
		chunks:       d("chunks_fetched_total", "Chunks fetched from peers and verified."),
		bad:          d("bad_chunks_total", "Fetched chunks that failed their hash check (each is fetched again)."),
		dropped:      d("dropped_sources_total", "Sources a fetch gave up on."),
		removals:     d("removed_total", "Blobs deleted from the store by checkpoint pruning."),
	}
}

func (c *blobCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *blobCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.data == nil || c.n.data.blobs == nil {
		return
	}
	svc := c.n.data.blobs
	count, size := storeSize(svc.Store().Dir())
	gauge(ch, c.stored, float64(count))
	gauge(ch, c.storedBytes, float64(size))
	st := svc.Stats()
	for d, v := range map[*prometheus.Desc]int64{c.fetches: st.BlobsFetched, c.fetchedBytes: st.BytesFetched,
		c.served: st.ChunksServed, c.chunks: st.ChunksFetched, c.bad: st.BadChunks, c.dropped: st.DroppedSources,
		c.removals: c.removed.Load()} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
}

// storeSize counts the complete blobs in a store directory and their bytes: a blob's data
// file is named by its ID and counts once its manifest (ID.manifest) exists too.
func storeSize(dir string) (count int, size int64) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	for _, e := range entries {
		if !blob.ValidID(e.Name()) || !names[e.Name()+".manifest"] {
			continue
		}
		if info, err := e.Info(); err == nil {
			count++
			size += info.Size()
		}
	}
	return count, size
}

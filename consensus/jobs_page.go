package consensus

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Paginated job listing. Jobs are ordered by submission time, then ID; a cursor names the
// last job of a page by both, so a page stays correct when jobs before it are dropped.

// Page sizes of a job listing.
const (
	DefaultPageSize = 100
	MaxPageSize     = 500
)

// JobPage is one page of a job listing; Next is the cursor of the following page, ""
// after the last.
type JobPage struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next,omitempty"`
}

func cursorOf(j *Job) string {
	return fmt.Sprintf("%d.%s", j.SubmittedAt.UnixNano(), j.ID)
}

// afterCursor reports whether j comes after cursor in listing order.
func afterCursor(j *Job, cursor string) bool {
	if cursor == "" {
		return true
	}
	ns, id, ok := strings.Cut(cursor, ".")
	var n int64
	if _, err := fmt.Sscan(ns, &n); !ok || err != nil {
		return true // a malformed cursor lists from the start
	}
	t := time.Unix(0, n)
	if !j.SubmittedAt.Equal(t) {
		return j.SubmittedAt.After(t)
	}
	return j.ID > id
}

// JobsPage returns up to limit jobs after cursor (limit 0: DefaultPageSize, capped at
// MaxPageSize) and the applied index.
func (f *FSM) JobsPage(cursor string, limit int) (JobPage, uint64) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	f.mu.RLock()
	defer f.mu.RUnlock()
	var sel []*Job
	for _, j := range f.state.Jobs {
		if afterCursor(j, cursor) {
			sel = append(sel, j)
		}
	}
	sort.Slice(sel, func(a, b int) bool { return jobBefore(sel[a], sel[b]) })
	var page JobPage
	for i, j := range sel {
		if i == limit {
			page.Next = cursorOf(sel[i-1])
			break
		}
		page.Jobs = append(page.Jobs, cloneJob(j))
	}
	return page, f.applied
}

func jobBefore(a, b *Job) bool {
	if !a.SubmittedAt.Equal(b.SubmittedAt) {
		return a.SubmittedAt.Before(b.SubmittedAt)
	}
	return a.ID < b.ID
}

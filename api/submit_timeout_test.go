package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSubmitOutlastsTheRequestTimeout checks that a submit waits for a node that answers
// after Config.Timeout (a node publishing a corpus of gigabytes answered after the CLI's
// 30 s and the CLI reported the node unreachable), while other requests keep Timeout.
func TestSubmitOutlastsTheRequestTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the slow node: it answers well after the client's request timeout
		case <-time.After(10 * timeout):
		case <-r.Context().Done():
			return
		}
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		json.NewEncoder(w).Encode(SubmitResult{ID: "j1"})
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Addr: srv.URL, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Submit(context.Background(), []byte("name: x\n"), "")
	if err != nil || id != "j1" {
		t.Fatalf("submit to a slow node: id %q, err %v; want j1", id, err)
	}
	if _, err := c.Status(context.Background()); err == nil {
		t.Fatal("a status read outlived Config.Timeout; only submits may")
	}
}

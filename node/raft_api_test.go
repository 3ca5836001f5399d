package node

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/internal/testutil"
)

// TestRaftPromotionAPI: POST /v1/raft/{promote,refuse}/{id} needs the token like every
// route, and answers 400 naming what is wrong for a node outside the group and for a voter.
func TestRaftPromotionAPI(t *testing.T) {
	n := startNode(t, testConfig(t))
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { return n.Consensus() != nil && n.Consensus().Leader() != "" })
	self := n.ID().String()
	if code, body := rawRequest(t, n, "POST", "/v1/raft/promote/"+self, "", http.Header{}, ""); code != http.StatusUnauthorized {
		t.Fatalf("promote without the token: %d %s; want 401", code, body)
	}
	c := testClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stranger := "12D3KooWQbVZa26s5Dqa5VkkMeXaBdUHBMVfHfQj4oTCqVhSio6x"
	for _, tc := range []struct{ name, id, want string }{
		{"promote a stranger", stranger, "not in the raft group"},
		{"refuse a voter", self, "already a voter"},
		{"promote a bad id", "not-a-peer", "promotion node"},
	} {
		var err error
		if strings.HasPrefix(tc.name, "refuse") {
			_, err = c.Refuse(ctx, tc.id)
		} else {
			_, err = c.Promote(ctx, tc.id)
		}
		var apiErr *api.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) {
			t.Errorf("%s: %v; want 400 naming %q", tc.name, err, tc.want)
		}
	}
}

package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

// silentHost is a libp2p host that connects and never authenticates.
func silentHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/udp/0/quic-v1"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Issue 25: a peer that never authenticated kept its connection ~35 s (attempts of 5, 10
// and 20 s) and any number of them could wait at once. Now the attempts end with the
// admission window (AuthWindow) and at most MaxPendingAuth peers wait at once; one more
// is disconnected at once, and an honest member is still admitted afterwards.
func TestUnauthenticatedPeersAreBoundedInNumberAndTime(t *testing.T) {
	cfg := testConfig(t, testSecret)
	cfg.AuthTimeout, cfg.AuthWindow, cfg.MaxPendingAuth = time.Second, 2*time.Second, 2
	a := startMesh(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info := peer.AddrInfo{ID: a.ID(), Addrs: a.host.Addrs()}
	var silent []host.Host
	start := time.Now()
	for range 2 {
		h := silentHost(t)
		if err := h.Connect(ctx, info); err != nil {
			t.Fatal(err)
		}
		silent = append(silent, h)
	}
	testutil.WaitFor(t, 5*time.Second, "two peers authenticating", func() bool {
		a.adm.mu.Lock()
		defer a.adm.mu.Unlock()
		return a.adm.pending == 2
	})
	extra := silentHost(t)
	_ = extra.Connect(ctx, info) // may succeed before a closes it
	testutil.WaitFor(t, 5*time.Second, "the third silent peer disconnected", func() bool {
		return a.host.Network().Connectedness(extra.ID()) != network.Connected
	})
	if a.Stats().AuthCrowded == 0 || a.host.Network().Connectedness(silent[0].ID()) != network.Connected {
		t.Errorf("the third silent peer was not refused at once (crowded %d) while two were pending", a.Stats().AuthCrowded)
	}
	for _, h := range silent {
		testutil.WaitFor(t, 10*time.Second, "a silent peer disconnected", func() bool {
			return a.host.Network().Connectedness(h.ID()) != network.Connected
		})
	}
	// Without the window the attempts take 1 + 2 + 4 = 7 s: two retries per peer, not one.
	testutil.Within(t, "disconnecting silent peers (window 2 s)", time.Since(start), 4*time.Second)
	if n := a.Stats().AuthRetries; n != 2 {
		t.Errorf("%d auth retries for two silent peers, want one each (attempts of 1 s, then the window's last 1 s)", n)
	}
	b := startMesh(t, testConfig(t, testSecret, a))
	testutil.WaitFor(t, 10*time.Second, "an honest member admitted after the flood", func() bool { return a.IsAdmitted(b.ID()) })
}

package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/dataplane"
)

// Timing of the confirmation of a peer's data-plane address candidates.
const (
	// confirmTimeout bounds one candidate's handshake: an address that does not answer
	// (a private address elsewhere, a NAT's public side) costs at most this.
	confirmTimeout = 3 * time.Second
	// confirmStagger is how long a candidate is given before the next one starts as
	// well (a failure starts the next at once), as Happy Eyeballs does: a peer with
	// several silent candidates is confirmed within about confirmTimeout, not their sum.
	confirmStagger = 250 * time.Millisecond
	// retryFailed is how soon a peer none of whose candidates answered is tried again;
	// retryInbound, how soon once the peer has opened a connection to this node (it is
	// behind a NAT and probed this node), which the probe can then use.
	retryFailed  = 30 * time.Second
	retryInbound = 5 * time.Second
)

// linkProber measures the link to every live peer that announces a data-plane address,
// over the data plane itself (so a WAN relay in front of a peer's data port is what gets
// measured), and records the result in the mesh's peer table as a LinkDataPlane link,
// which the table prefers. A peer is probed when it joins (or announces new addresses)
// and then every Config.Probe.Interval (negative: on join only); one probe runs at a
// time. The probe sizes and timeout are Config.Probe's.
//
// Before measuring a peer whose candidates are new to it, the prober confirms them
// (reach): it dials them in the peer's order of preference, each handshake checking the
// peer's identity, and keeps the first that answers. That address is the one the node
// then sends tensors to (dataAddr). When none answers but the peer has dialled this node
// (it is behind a NAT), the link is measured over the peer's connection.
type linkProber struct {
	n      *Node
	cfg    dataplane.ProbeConfig
	every  time.Duration // ≤ 0: on join only
	check  time.Duration // how often the peer table is looked at
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	confirmTimeout, confirmStagger, retryFailed time.Duration

	probed map[peer.ID]probeMark // live peers and when they were last probed (loop only)

	mu      sync.Mutex
	reached map[peer.ID]string // the candidate a handshake confirmed, per peer
}

type probeMark struct {
	cands string // the candidates probed, joined
	at    time.Time
	ok    bool
}

func newLinkProber(n *Node) *linkProber {
	p := n.cfg.Probe
	every := p.Interval
	if every == 0 {
		every = 5 * time.Minute
	}
	check := n.cfg.Heartbeat
	if check <= 0 {
		check = 2 * time.Second
	}
	return &linkProber{n: n, every: every, check: check, probed: map[peer.ID]probeMark{}, reached: map[peer.ID]string{},
		confirmTimeout: confirmTimeout, confirmStagger: confirmStagger, retryFailed: retryFailed,
		cfg: dataplane.ProbeConfig{Pings: p.Pings, MinBytes: p.MinBytes, MaxBytes: p.MaxBytes, Target: p.Target, Timeout: p.Timeout}}
}

func (l *linkProber) Name() string { return "linkprobe" }

func (l *linkProber) Start(context.Context) error {
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return nil
}

// Close stops probing, waiting for a probe in progress to end.
func (l *linkProber) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

func (l *linkProber) loop() {
	defer l.wg.Done()
	t := time.NewTicker(l.check)
	defer t.Stop()
	for {
		l.n.refreshDataAddrs() // dataaddrs.go: this node's own candidates
		for _, pi := range l.due() {
			l.probe(pi)
		}
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// due returns the live peers with a data-plane address that need a probe, forgetting
// peers that are no longer alive (so that their return counts as a join).
func (l *linkProber) due() []mesh.PeerInfo {
	dp := l.n.DataPlane()
	inbound := func(id peer.ID) bool { return dp != nil && dp.Connected(id.String()) }
	var out []mesh.PeerInfo
	live := map[peer.ID]bool{}
	now := time.Now()
	for _, pi := range l.n.mesh.Peers() {
		cands := pi.Profile.DataCandidates()
		if pi.State != mesh.StateAlive || len(cands) == 0 {
			continue
		}
		live[pi.ID] = true
		m, ok := l.probed[pi.ID]
		age := now.Sub(m.at)
		retry := !m.ok && (age >= l.retryFailed || age >= retryInbound && inbound(pi.ID))
		if !ok || m.cands != strings.Join(cands, ",") || (l.every > 0 && age >= l.every) || retry {
			out = append(out, pi)
		}
	}
	for id := range l.probed {
		if !live[id] {
			delete(l.probed, id)
			l.setReached(id, "")
		}
	}
	return out
}

// probe confirms the peer's candidates when they are new or the last probe failed, then
// measures the link.
func (l *linkProber) probe(pi mesh.PeerInfo) {
	dp := l.n.DataPlane()
	if dp == nil || l.ctx.Err() != nil {
		return
	}
	cands := pi.Profile.DataCandidates()
	id := pi.ID.String()
	mark := probeMark{cands: strings.Join(cands, ",")}
	addr, err := l.addrFor(dp, pi, cands)
	if l.ctx.Err() != nil {
		return
	}
	var rtt time.Duration
	var bw float64
	if err == nil {
		rtt, bw, err = dp.Probe(l.ctx, id, l.cfg)
		if l.ctx.Err() != nil {
			return
		}
	}
	link := mesh.Link{RTT: rtt, BandwidthBps: bw / 8, MeasuredAt: time.Now(), Source: mesh.LinkDataPlane, Addr: addr}
	if err != nil {
		l.n.log.Info("data-plane link probe failed", "peer", pi.ID, "addrs", cands, "err", err)
		link = mesh.Link{MeasuredAt: link.MeasuredAt, Err: err.Error(), Source: mesh.LinkDataPlane, Addr: addr}
		for _, old := range pi.Links {
			if old.Source == mesh.LinkDataPlane {
				link.RTT, link.BandwidthBps = old.RTT, old.BandwidthBps // keep the last good numbers
			}
		}
	} else {
		mark.ok = true
		l.n.log.Debug("data-plane link probed", "peer", pi.ID, "addr", addr, "rtt", rtt, "bandwidth_mbps", bw/1e6)
	}
	l.n.mesh.SetLink(pi.ID, link)
	mark.at = link.MeasuredAt
	l.probed[pi.ID] = mark
}

// inboundAddr is Link.Addr for a peer reached only over the connection it opened.
const inboundAddr = "inbound"

// addrFor returns where the probe reaches the peer: the confirmed candidate, confirming
// the candidates again unless they are the ones last probed successfully; or inboundAddr
// when none answers but the peer holds a connection to this node.
func (l *linkProber) addrFor(dp *dataplane.Plane, pi mesh.PeerInfo, cands []string) (string, error) {
	id := pi.ID.String()
	last, seen := l.probed[pi.ID]
	if prev := l.reachedAddr(pi.ID); seen && last.ok && prev != "" && last.cands == strings.Join(cands, ",") {
		return prev, nil
	}
	addr, err := l.reach(dp, id, cands)
	if err == nil {
		if prev := l.reachedAddr(pi.ID); prev != addr {
			l.n.log.Info("data-plane address confirmed", "peer", pi.ID, "addr", addr, "candidates", cands)
		}
		l.setReached(pi.ID, addr)
		dp.SetPeerAddr(id, addr)
		return addr, nil
	}
	l.setReached(pi.ID, "")
	if dp.Connected(id) {
		l.n.log.Info("no data-plane address of the peer answers; using the connection it opened", "peer", pi.ID, "candidates", cands, "err", err)
		return inboundAddr, nil
	}
	return "", fmt.Errorf("no data-plane address of %s answers: %w", pi.ID, err)
}

// reach confirms the candidates (at most mesh.MaxDataAddrs, each bounded by
// confirmTimeout) in the peer's order of preference and returns the first whose
// handshake proves the peer's identity. As in Happy Eyeballs, each candidate starts
// confirmStagger after the one before, or as soon as that one failed, and the first to
// succeed wins: a preferred candidate that answers is chosen, one that stays silent
// delays the others by confirmStagger only.
func (l *linkProber) reach(dp *dataplane.Plane, id string, cands []string) (string, error) {
	cands = cands[:min(len(cands), mesh.MaxDataAddrs)]
	if len(cands) == 0 {
		return "", errors.New("no candidate")
	}
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(cands))
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(l.ctx)
	defer cancel() // runs before wg.Wait: unfinished handshakes end at once
	next := 0
	launch := func() {
		if next == len(cands) {
			return
		}
		i := next
		next++
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, l.confirmTimeout)
			defer cancel()
			results <- result{i, dp.Confirm(cctx, id, cands[i])}
		})
	}
	launch()
	tick := time.NewTicker(l.confirmStagger)
	defer tick.Stop()
	errs := make([]error, 0, len(cands))
	for len(errs) < len(cands) {
		select {
		case r := <-results:
			if r.err == nil {
				return cands[r.i], nil
			}
			errs = append(errs, r.err) // names the address
			launch()
		case <-tick.C:
			launch()
		case <-l.ctx.Done():
			return "", l.ctx.Err()
		}
	}
	return "", errors.Join(errs...)
}

func (l *linkProber) reachedAddr(id peer.ID) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reached[id]
}

func (l *linkProber) setReached(id peer.ID, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr == "" {
		delete(l.reached, id)
	} else {
		l.reached[id] = addr
	}
}

// dataAddr is where the node sends a peer's tensors: the candidate a probe confirmed
// while the peer still announces it, else its first (preferred) candidate.
func (l *linkProber) dataAddr(id peer.ID, cands []string) (string, bool) {
	if a := l.reachedAddr(id); a != "" && slices.Contains(cands, a) {
		return a, true
	}
	if len(cands) == 0 {
		return "", false
	}
	return cands[0], true
}

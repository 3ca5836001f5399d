package mesh

import (
	"context"
	"errors"
	"fmt"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// signerDialEvery spaces the dials of heartbeat signers this node has not admitted: a
// genuine new member is dialled within a heartbeat or two, minted keys cannot make this
// node dial faster than this.
const signerDialEvery = 250 * time.Millisecond

// startPubsub creates gossipsub over the admitted host (signed messages, strict
// verification), joins the heartbeat topic and registers its validator.
func (m *Mesh) startPubsub() error {
	ps, err := pubsub.NewGossipSub(m.ctx, m.ah,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithPeerFilter(func(p peer.ID, _ string) bool { return m.adm.isAdmitted(p) }),
	)
	if err != nil {
		return fmt.Errorf("start gossipsub: %w", err)
	}
	m.ps = ps
	topic := HeartbeatTopic(m.cfg.meshName())
	if err := ps.RegisterTopicValidator(topic, m.validateHeartbeat); err != nil {
		return fmt.Errorf("heartbeat validator: %w", err)
	}
	if m.topic, err = ps.Join(topic); err != nil {
		return fmt.Errorf("join %s: %w", topic, err)
	}
	return nil
}

// validateHeartbeat accepts a heartbeat only if the peer that delivered it is admitted (or
// is this node), its signer is not refused here, it parses, it describes its own signer in
// this mesh, and this node admitted its signer itself (signerAdmitted). A malformed
// heartbeat disconnects the peer that delivered it; one of an unknown version is ignored.
func (m *Mesh) validateHeartbeat(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	self := from == m.host.ID()
	if !self && !m.adm.isAdmitted(from) {
		m.log.Info("heartbeat from a peer not admitted", "peer", from)
		return pubsub.ValidationReject
	}
	if !self && !m.gater.permits(msg.GetFrom()) {
		// Relayed from a member that admits a peer this node refuses (allowlist or ban).
		return pubsub.ValidationIgnore
	}
	hb, err := decodeHeartbeat(msg.GetData())
	if errors.Is(err, errHeartbeatVersion) {
		m.log.Debug("ignoring heartbeat", "peer", from, "err", err)
		return pubsub.ValidationIgnore
	}
	if err == nil && hb.ID != msg.GetFrom().String() {
		err = fmt.Errorf("heartbeat claims id %s but was signed by %s", hb.ID, msg.GetFrom())
	}
	if err == nil && hb.Mesh != m.cfg.meshName() {
		err = fmt.Errorf("heartbeat for mesh %q on mesh %q's topic", hb.Mesh, m.cfg.meshName())
	}
	if err != nil {
		if !self {
			m.malformed(from, "heartbeat", err)
		}
		return pubsub.ValidationReject
	}
	if !self && !m.signerAdmitted(from, msg.GetFrom(), hb) {
		return pubsub.ValidationIgnore
	}
	msg.ValidatorData = hb
	return pubsub.ValidationAccept
}

// signerAdmitted reports whether this node admitted hb's signer itself, over a connection
// of its own. An admitted member can sign heartbeats with keys it mints at will and relay
// them (a Sybil relay): they carry valid signatures but nobody proved the join secret for
// them. Such a heartbeat is dropped, neither used nor forwarded, and the signer is dialled
// so that a genuine new member is admitted directly and counted from its next heartbeat.
// Those dials are rate-limited across all signers (signerDialEvery), since keys are free.
func (m *Mesh) signerAdmitted(from, signer peer.ID, hb *heartbeat) bool {
	if signer == m.host.ID() || m.adm.isAdmitted(signer) {
		return true
	}
	m.unadmittedSigners.Add(1)
	m.log.Debug("heartbeat of a signer not admitted here; dropped", "signer", signer, "relayed_by", from)
	if hb.Leaving {
		return false
	}
	m.dialMu.Lock()
	due := time.Since(m.lastSignerDial) >= signerDialEvery
	if due {
		m.lastSignerDial = time.Now()
	}
	m.dialMu.Unlock()
	if due {
		m.connectAsync(peer.AddrInfo{ID: signer, Addrs: hb.multiaddrs()})
	}
	return false
}

// heartbeatLoop publishes a heartbeat at once and then every interval.
func (m *Mesh) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.heartbeatInterval())
	defer t.Stop()
	for {
		m.publishHeartbeat(false)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Mesh) publishHeartbeat(leaving bool) {
	if !leaving && m.leaving.Load() {
		return
	}
	hb := &heartbeat{
		ID: m.host.ID().String(), Mesh: m.cfg.meshName(), Seq: m.seq.Add(1),
		SentAt: time.Now().UnixMilli(), Profile: m.profile.Load(), Leaving: leaving,
	}
	for _, a := range append(m.RelayAddrs(), m.host.Addrs()...) { // relay.go: circuits first
		if len(hb.Addrs) == maxHeartbeatAddrs {
			break
		}
		hb.Addrs = append(hb.Addrs, a.String())
	}
	data, err := encodeHeartbeat(hb)
	if err != nil {
		m.log.Error("heartbeat", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.topic.Publish(ctx, data); err != nil && m.ctx.Err() == nil {
		m.log.Warn("publish heartbeat", "err", err)
	}
}

// receiveLoop feeds validated heartbeats into the peer table, dials members it is not
// connected to (so the mesh becomes fully connected and probes run direct) and queues a
// probe for each member that joins.
func (m *Mesh) receiveLoop(ctx context.Context) {
	sub, err := m.topic.Subscribe()
	if err != nil {
		m.log.Error("subscribe to heartbeats", "err", err)
		return
	}
	defer sub.Cancel()
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return
		}
		hb, ok := msg.ValidatorData.(*heartbeat)
		p := msg.GetFrom()
		if !ok || p == m.host.ID() {
			continue
		}
		if m.table.observe(p, hb) {
			m.log.Info("peer joined", "peer", p)
			m.queueProbe(p)
		}
		if !hb.Leaving {
			m.connectAsync(peer.AddrInfo{ID: p, Addrs: hb.multiaddrs()})
		}
	}
}

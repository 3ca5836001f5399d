package parallel

import "context"

// A spare node can take a lost stage over instead of the node that held it (which may
// never come back): the control plane puts the spare in the dead node's place in the plan,
// the survivors substitute it for the dead node in their groups (Substitute), and the
// spare, built with that plan, rebuilds the stage as a restarted node would
// (RebuildFrom, JoinFrom). The survivors' groups keep their order and size, so a member's
// index (its bit in the quorum's sets, its batch share) is the same for the spare as it
// was for the dead node. The substitution is applied on the training goroutine at the
// survivor's next consistent step, before the copies due there are served: the spare's
// copy is taken later, so the survivors name it in their groups before it announces
// itself at an outer step.

// substitution is a pending replacement of a member of the plan.
type substitution struct{ old, new string }

// Substitute tells the worker that the control plane put node new in the place of node
// old, which it retired (a spare rebuilding a lost stage): from the worker's next
// consistent step on, its plan and its groups name new where they named old; new is a
// joiner meanwhile (Readmit's: the worker serves it a copy of its state when asked, and
// admits it into its outer steps' quorum once heard). Safe to call while the worker steps.
func (w *Worker) Substitute(ctx context.Context, old, new string) {
	w.peers.join(new)
	w.copies.mu.Lock()
	w.copies.subs = append(w.copies.subs, substitution{old, new})
	w.copies.mu.Unlock()
	go w.listenForCopyRequests(ctx, new)
}

// join marks id, a node the worker's plan does not name yet, as a joiner.
func (p *peerSet) join(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired[id], p.joining[id] = true, true
	close(p.changed)
	p.changed = make(chan struct{})
}

// applySubstitutions renames the substituted members in the worker's plan, groups and
// neighbours. On the training goroutine: the collectives of earlier steps still running
// in the background keep the member lists they were started with.
func (w *Worker) applySubstitutions() {
	w.copies.mu.Lock()
	subs := w.copies.subs
	w.copies.subs = nil
	w.copies.mu.Unlock()
	for _, s := range subs {
		w.plan = w.plan.substitute(s.old, s.new)
		for i := range w.runs {
			w.runs[i].group.Members = renamed(w.runs[i].group.Members, s.old, s.new)
		}
		for _, n := range []*string{&w.prev, &w.next, &w.tiedPeer} {
			if *n == s.old {
				*n = s.new
			}
		}
	}
}

// substitute is p with node new wherever p names old.
func (p Plan) substitute(old, new string) Plan {
	out := p
	out.Replicas = make([][]StagePlan, len(p.Replicas))
	for r, stages := range p.Replicas {
		out.Replicas[r] = append([]StagePlan(nil), stages...)
		for s := range out.Replicas[r] {
			if out.Replicas[r][s].Node == old {
				out.Replicas[r][s].Node = new
			}
		}
	}
	return out
}

// renamed is a copy of ids with new in the place of old.
func renamed(ids []string, old, new string) []string {
	out := append([]string(nil), ids...)
	for i := range out {
		if out[i] == old {
			out[i] = new
		}
	}
	return out
}

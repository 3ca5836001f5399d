package model

// ActivationPeakBytes measures the activation memory of one training pass of cfg's whole
// model over a micro-batch of B sequences: the most bytes its workspaces hold at once (the
// engine frees nothing before a step ends, so backward temporaries count too), with or
// without recomputation (of the blocks and the head). With recomputation it is the main
// workspace's peak (every layer's input and output, input gradients) plus the scratch
// workspaces' (one layer's recomputed forward and its backward), an upper bound since
// the peaks need not coincide.
func ActivationPeakBytes(cfg Config, B int, recompute bool) int64 {
	layers := New(cfg, 1).Layers
	if recompute {
		layers = WithRecompute(layers)
	}
	mb := &Batch{B: B, T: cfg.Context, Inputs: make([]int32, B*cfg.Context), Targets: make([]int32, B*cfg.Context)}
	for i := range mb.Inputs {
		mb.Inputs[i], mb.Targets[i] = int32(i%cfg.Vocab), int32((i+1)%cfg.Vocab)
	}
	ws := &Workspace{}
	ForwardBackward(ws, layers, mb, 1)
	return ws.PeakBytes() + ScratchPeakBytes(layers)
}

// ScratchPeakBytes is the peak of the scratch workspaces that layers' recomputed layers
// share (0 when none is recomputed), looking through wrappers with an Unwrap method.
func ScratchPeakBytes(layers []Layer) int64 {
	for _, l := range layers {
		for {
			w, ok := l.(interface{ Unwrap() Layer })
			if !ok {
				break
			}
			l = w.Unwrap()
		}
		if r, ok := l.(*Recomputed); ok {
			return r.ScratchPeakBytes()
		}
	}
	return 0
}

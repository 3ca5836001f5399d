package kernels

// EmbeddingForward sets out[r] = wte[tokens[r]] + wpe[r mod T] for each of the len(tokens)
// rows (rows are B sequences of T positions); wte is V×d and wpe at least T×d. Tokens must
// be in [0, V): the caller validates data before it gets here. An empty wpe is no position
// table (Llama's): out[r] = wte[tokens[r]].
func EmbeddingForward(out, wte, wpe []float32, tokens []int32, T, d int) {
	ParallelFor(len(tokens), rowGrain*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			tok, pos := int(tokens[r]), r%T
			o, e := out[r*d:r*d+d], wte[tok*d:tok*d+d]
			if len(wpe) == 0 {
				copy(o, e)
				continue
			}
			p := wpe[pos*d : pos*d+d]
			for j := range o {
				o[j] = e[j] + p[j]
			}
		}
	})
}

// EmbeddingBackward scatters dy back into the tables:
//
//	dwte[tokens[r]] += dy[r];  dwpe[r mod T] += dy[r]   (rows in order r = 0, 1, …)
//
// Work is split over table rows (token ids, positions), so each table row sums its
// contributions in row order whatever the thread count. An empty dwpe is skipped.
func EmbeddingBackward(dwte, dwpe, dy []float32, tokens []int32, T, d, V int) {
	rows := len(tokens)
	ParallelFor(V, 8, func(lo, hi int) {
		for r, t := range tokens {
			if tok := int(t); tok >= lo && tok < hi {
				acc, g := dwte[tok*d:tok*d+d], dy[r*d:r*d+d]
				for j := range acc {
					acc[j] += g[j]
				}
			}
		}
	})
	if len(dwpe) == 0 {
		return
	}
	ParallelFor(T, 8, func(lo, hi int) {
		for pos := lo; pos < hi; pos++ {
			acc := dwpe[pos*d : pos*d+d]
			for r := pos; r < rows; r += T {
				g := dy[r*d : r*d+d]
				for j := range acc {
					acc[j] += g[j]
				}
			}
		}
	})
}

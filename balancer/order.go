package balancer

import (
	"math"
	"sort"
)

// nearestOrder chains nodes greedily along cheap links: it starts from start and appends
// the unvisited node whose link pair to the last one moves a typical activation fastest
// (serialisation both ways plus latency), breaking ties by memory, then speed, then ID.
// On a uniform network it is the memory order; on a clustered one it walks a cluster before
// crossing to the nearest next one. O(n²).
func (in *instance) nearestOrder(nodes []int, start int, bytes float64) []int {
	left := in.memoryOrder(nodes)
	order := make([]int, 0, len(nodes))
	cur := start
	for len(left) > 0 {
		if len(order) > 0 {
			best, bestCost := 0, math.Inf(1)
			for i, v := range left {
				if c := in.hopCost(cur, v, bytes); c < bestCost*(1-1e-12) {
					best, bestCost = i, c
				}
			}
			cur = left[best]
		}
		order = append(order, cur)
		for i, v := range left {
			if v == cur {
				left = append(left[:i:i], left[i+1:]...)
				break
			}
		}
	}
	return order
}

// hopCost is the time to move bytes from a to b and back.
func (in *instance) hopCost(a, b int, bytes float64) float64 {
	bwF, latF := in.link(a, b)
	bwB, latB := in.link(b, a)
	return bytes/bwF + bytes/bwB + latF + latB
}

func (in *instance) speedOrder(nodes []int) []int {
	order := append([]int(nil), nodes...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if in.speed[a] != in.speed[b] {
			return in.speed[a] > in.speed[b]
		}
		if in.mem[a] != in.mem[b] {
			return in.mem[a] > in.mem[b]
		}
		return in.ids[a] < in.ids[b]
	})
	return order
}

// clusters splits nodes into groups joined by fast links: a pair is fast when both
// directions carry at least a quarter of the best measured bandwidth. Groups are ordered by
// their first node. O(n²).
func (in *instance) clusters() [][]int {
	best := 0.0
	for a := 0; a < in.n; a++ {
		for b := 0; b < in.n; b++ {
			if a != b {
				best = math.Max(best, in.bw[a*in.n+b])
			}
		}
	}
	parent := make([]int, in.n)
	for i := range parent {
		parent[i] = i
	}
	find := func(x int) int {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	for a := 0; a < in.n; a++ {
		for b := a + 1; b < in.n; b++ {
			if math.Min(in.bw[a*in.n+b], in.bw[b*in.n+a]) >= best/4 {
				if ra, rb := find(a), find(b); ra != rb {
					parent[max(ra, rb)] = min(ra, rb)
				}
			}
		}
	}
	byRoot := map[int]int{}
	var groups [][]int
	for v := 0; v < in.n; v++ {
		r := find(v)
		g, ok := byRoot[r]
		if !ok {
			g = len(groups)
			byRoot[r] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], v)
	}
	return groups
}

// snakeGroups deals nodes, fastest first, into r groups in boustrophedon order so that the
// groups' total speeds come out close.
func (in *instance) snakeGroups(nodes []int, r int) [][]int {
	groups := make([][]int, r)
	for i, v := range in.speedOrder(nodes) {
		g := i % r
		if (i/r)%2 == 1 {
			g = r - 1 - g
		}
		groups[g] = append(groups[g], v)
	}
	return groups
}

// orderMoves lists the neighbourhood local search explores: swaps of two positions and
// moves of one node to another position.
func orderMoves(order []int) [][]int {
	k := len(order)
	var out [][]int
	for i := 0; i < k; i++ {
		for j := i + 1; j < k; j++ {
			o := append([]int(nil), order...)
			o[i], o[j] = o[j], o[i]
			out = append(out, o)
		}
	}
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			if j == i || j == i+1 || j == i-1 {
				continue
			}
			o := make([]int, 0, k)
			rest := append(append([]int(nil), order[:i]...), order[i+1:]...)
			o = append(o, rest[:j]...)
			o = append(o, order[i])
			o = append(o, rest[j:]...)
			out = append(out, o)
		}
	}
	return out
}

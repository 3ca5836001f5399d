package parallel

import "slices"

// OffenderAfter is how many consecutive synchronisations in which the same member's
// contribution was dropped make it an offender: one rejection can be a glitch (a
// transient overflow), three in a row are a replica that keeps sending what the others
// refuse.
const OffenderAfter = 3

// offenderWatch counts, per member, the consecutive synchronisations that dropped its
// contribution, and names each member once when the count reaches OffenderAfter.
type offenderWatch struct {
	streak map[string]int
	named  map[string]bool
}

func newOffenderWatch() *offenderWatch {
	return &offenderWatch{streak: map[string]int{}, named: map[string]bool{}}
}

// observe takes one step's rejections and whether the step synchronised the replicas,
// and returns the members that became offenders at it, sorted (a Proven rejection, a
// failed audit, names its member at once). A member accepted in a
// synchronisation starts again from zero. A member only left out as late (Rejection.Late:
// a straggler past the grace window, or a dead member not retired yet) neither counts nor
// starts again: nothing it sent was judged, and a slow honest replica late three outer
// steps in a row was named an offender and re-planned away from a checkpoint, where the
// grace window means it to rejoin the next outer step.
func (o *offenderWatch) observe(rejected []Rejection, synced bool) []string {
	dropped, late := map[string]bool{}, map[string]bool{}
	for _, r := range rejected {
		if r.Late {
			late[r.Member] = true
			continue
		}
		dropped[r.Member] = true
	}
	if synced || len(rejected) > 0 {
		for m := range o.streak {
			if !dropped[m] && !late[m] {
				delete(o.streak, m)
			}
		}
	}
	var out []string
	proven := map[string]bool{}
	for _, r := range rejected {
		proven[r.Member] = proven[r.Member] || r.Proven
	}
	for m := range dropped {
		o.streak[m]++
		if (o.streak[m] >= OffenderAfter || proven[m]) && !o.named[m] {
			o.named[m] = true
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

package balancer

import (
	"errors"
	"fmt"
)

// ErrInfeasible is wrapped by every error that says no plan can satisfy the inputs; test
// for it with errors.Is and read the details with errors.As on *InfeasibleError.
var ErrInfeasible = errors.New("no feasible plan")

// InfeasibleError says which constraint fails and by how much.
type InfeasibleError struct {
	// Constraint names what failed: "nodes", "speed", "memory", "layer-memory",
	// "activation-memory", "optimal-size".
	Constraint string
	// Need and Have quantify it (bytes, FLOP/s or counts, as Msg says); Need > Have.
	Need, Have float64
	// Msg is the whole message for people.
	Msg string
}

func (e *InfeasibleError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInfeasible) true.
func (e *InfeasibleError) Is(target error) bool { return target == ErrInfeasible }

func infeasible(constraint string, need, have float64, format string, args ...any) error {
	return &InfeasibleError{Constraint: constraint, Need: need, Have: have, Msg: fmt.Sprintf(format, args...)}
}

// gib formats bytes for messages.
func gib(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

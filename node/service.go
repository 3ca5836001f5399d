package node

import (
	"context"
	"errors"
	"fmt"
)

// Service is one component of the node: the mesh, the profiler, the API, and later the
// control plane and the training engine. Start must return once the service runs (work
// continues on its own goroutines); Close stops it and releases what it holds.
type Service interface {
	Name() string
	Start(ctx context.Context) error
	Close() error
}

// funcService adapts two functions to Service.
type funcService struct {
	name  string
	start func(context.Context) error
	close func() error
}

func (s funcService) Name() string                    { return s.name }
func (s funcService) Start(ctx context.Context) error { return s.start(ctx) }
func (s funcService) Close() error                    { return s.close() }

// startAll starts services in order. If one fails, those already started are closed in
// reverse order and the failure is returned.
func startAll(ctx context.Context, services []Service) (started int, err error) {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			return i, errors.Join(fmt.Errorf("start %s: %w", s.Name(), err), closeAll(services[:i]))
		}
	}
	return len(services), nil
}

// closeAll closes services in reverse order and joins their errors.
func closeAll(services []Service) error {
	var errs []error
	for i := len(services) - 1; i >= 0; i-- {
		if err := services[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", services[i].Name(), err))
		}
	}
	return errors.Join(errs...)
}

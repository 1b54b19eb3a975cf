package app

import (
	"context"
	"errors"
	"testing"

	"github.com/waitroom/waitroom/internal/httpapi"
)

// TestReadyFailsFromTheDrainOn: once the drain has begun, /readyz's check is not ready even
// when every store check is excluded, so that its ping returns at once: the drain wins, not
// whichever of the two a select happens to pick (a probe answered ready during the drain would
// put the instance back into its balancer).
func TestReadyFailsFromTheDrainOn(t *testing.T) {
	a := &App{draining: make(chan struct{})}
	all := httpapi.ReadyChecks{Database: true, Redis: true}
	if err := a.ready(context.Background(), all); err != nil {
		t.Fatalf("before the drain, every check excluded: %v", err)
	}
	a.Drain()
	for i := range 100000 {
		if err := a.ready(context.Background(), all); !errors.Is(err, httpapi.ErrShuttingDown) {
			t.Fatalf("call %d during the drain: %v, want ErrShuttingDown", i, err)
		}
	}
}

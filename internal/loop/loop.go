// Package loop is the lifecycle every background component of an instance shares: run a step
// every interval until stopped, log its failures, and stop cleanly (before a start, twice, or
// concurrently).
package loop

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Loop runs one step function periodically. The zero Loop is stopped; Stop on it is a no-op.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start calls step every interval until Stop or ctx ends. A failed step is logged as
// "<name> failed" with its error, unless the loop is stopping. Start on a running loop is a
// no-op.
func (l *Loop) Start(ctx context.Context, name string, interval time.Duration, log *slog.Logger, step func(context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := step(ctx); err != nil && ctx.Err() == nil {
					log.Warn(name+" failed", "err", err)
				}
			}
		}
	}()
}

// Stop ends the loop and waits for the running step to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

package queue

import (
	"context"
	"sync"
	"time"
)

// TopUps runs a store's background reservations of line numbers ahead (the top-up after an
// admission step, docs/durability.md): one at a time per event per instance, and one asked
// for while another runs is run after it with the latest figures. It is not dropped: the step
// after may need it, since a step admits only what was reserved ahead when SQL is slow or down
// (a dropped one left the next step's ceiling unreserved until a later step asked again).
// The zero value is ready; safe for concurrent use.
type TopUps struct {
	mu sync.Mutex
	// next: event id -> nil while a reservation runs, or the figures asked for meanwhile.
	next map[string]*topUp
}

type topUp struct{ seq, ahead int64 }

// Go runs raise(ctx, seq, ahead) for event in a goroutine of its own, each call bounded by
// timeout, or, when one of event's runs, records seq and ahead for the run after it (the
// latest asked for). raise's errors go to failed (nil: dropped; the next step asks again).
func (t *TopUps) Go(event string, seq, ahead int64, timeout time.Duration,
	raise func(ctx context.Context, seq, ahead int64) error, failed func(error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next == nil {
		t.next = map[string]*topUp{}
	}
	if _, busy := t.next[event]; busy {
		t.next[event] = &topUp{seq, ahead}
		return
	}
	t.next[event] = nil
	go func() {
		a := topUp{seq, ahead}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := raise(ctx, a.seq, a.ahead)
			cancel()
			if err != nil && failed != nil {
				failed(err)
			}
			t.mu.Lock()
			n := t.next[event]
			if n == nil {
				delete(t.next, event)
				t.mu.Unlock()
				return
			}
			t.next[event] = nil
			t.mu.Unlock()
			a = *n
		}
	}()
}

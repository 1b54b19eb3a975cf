package httpapi

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// TestDeadlinesShareAGrain: a request's deadline is its start plus the timeout, rounded up to
// the next deadlineGrain; requests of one grain share it (one Done channel), the next grain
// gets its own; the request's values pass through, its cancellation does not.
func TestDeadlinesShareAGrain(t *testing.T) {
	d := &deadlines{timeout: 2 * time.Second}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()
	start := time.Now().Truncate(deadlineGrain).Add(deadlineGrain / 4)
	a := d.bound(parent, start)
	b := d.bound(parent, start.Add(deadlineGrain/2))
	c := d.bound(parent, start.Add(deadlineGrain))

	at, ok := a.Deadline()
	if !ok || at.Before(start.Add(2*time.Second)) || at.After(start.Add(2*time.Second+deadlineGrain)) {
		t.Fatalf("deadline %v (%v), want within a grain after %v", at, ok, start.Add(2*time.Second))
	}
	if a.Done() != b.Done() {
		t.Fatal("two requests of one grain have different Done channels")
	}
	if cat, _ := c.Deadline(); a.Done() == c.Done() || !cat.Equal(at.Add(deadlineGrain)) {
		t.Fatalf("the next grain: deadline %v, want %v, and a Done of its own", cat, at.Add(deadlineGrain))
	}
	if a.Value(ctxKey{}) != "v" {
		t.Fatal("the request's values are lost")
	}
	cancel()
	if a.Err() != nil {
		t.Fatalf("the client's cancellation reached the bounded context: %v", a.Err())
	}
}

// TestDeadlinesExpire: at the deadline the bounded context and a context derived from it end
// with context.DeadlineExceeded.
func TestDeadlinesExpire(t *testing.T) {
	d := &deadlines{timeout: time.Millisecond}
	ctx := d.bound(context.Background(), time.Now())
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, c := range []context.Context{ctx, child} {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the deadline did not come")
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err %v, want DeadlineExceeded", c.Err())
		}
	}
}

package httpapi

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlineGrain is how finely the requests' deadlines are kept: a request's deadline is its
// start plus Config.RequestTimeout, rounded up to the next multiple of deadlineGrain, so that
// the requests that start within one grain share one deadline and its one timer.
const deadlineGrain = 10 * time.Millisecond

// deadlines gives requests their deadline without a timer and a cancellable context each.
//
// context.WithTimeout on a request's context costs a timer, a channel, a link in its parent
// (the request's own context: a map allocated for it) and its removal again: 5 % of an
// instance's CPU and a fifth of its allocations on the join path (CPU and heap profiles of a
// Redis-backed instance under 64 connections of joins, docs/scaling.md). Requests that start in
// the same deadlineGrain share one context.WithDeadline instead, made by the first of them; the
// request's context keeps its values (bounded.Value) but not its cancellation when the client
// goes away: a handler on this path runs until its work ends or the deadline, as the stores' own
// calls do once sent (a batched join is never cancelled by one of its joins).
type deadlines struct {
	timeout time.Duration
	cur     atomic.Pointer[sharedDeadline]
}

// sharedDeadline is the context of the requests whose deadline is at.
type sharedDeadline struct {
	at  time.Time
	ctx context.Context
	// cancel is never called: the grain's requests may run until at, when the context's own
	// timer ends it and releases what it holds.
	cancel context.CancelFunc
}

// bound returns parent with the deadline of a request starting at now: at most deadlineGrain
// later than now + timeout.
func (d *deadlines) bound(parent context.Context, now time.Time) context.Context {
	at := now.Add(d.timeout).Truncate(deadlineGrain).Add(deadlineGrain)
	s := d.cur.Load()
	if s == nil || !s.at.Equal(at) {
		n := &sharedDeadline{at: at}
		n.ctx, n.cancel = context.WithDeadline(context.Background(), at)
		// Whoever loses the race keeps its own: two contexts for one grain are as right as one.
		d.cur.CompareAndSwap(s, n)
		s = n
	}
	return &bounded{Context: parent, shared: s.ctx}
}

// bounded is a request's context with a shared deadline: its values are the request's, its
// deadline, Done and Err the shared context's. (context.Cause finds the request's own
// cancellation through Value, so it says nil at the deadline: read Err, as every handler does.)
type bounded struct {
	context.Context // the request's own, for Value
	shared          context.Context
}

func (b *bounded) Deadline() (time.Time, bool) { return b.shared.Deadline() }
func (b *bounded) Done() <-chan struct{}       { return b.shared.Done() }
func (b *bounded) Err() error                  { return b.shared.Err() }

// AfterFunc lets a context derived from b (context.WithCancel) hang on the shared deadline's
// list instead of a goroutine of its own watching Done (context's afterFuncer).
func (b *bounded) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(b.shared, f) }

package recorder

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"))
}

// newBackend returns a fresh backend (Redis under a prefix of its own, or memory) on clock.
func newBackend(t *testing.T, backend string, now func() time.Time) store.Backend {
	t.Helper()
	if backend == "redis" {
		c := redistest.Client(t)
		b, err := redisstore.NewBackend(redisstore.Config{Client: c, Prefix: redistest.Prefix(t, c), Now: now})
		require.NoError(t, err)
		return b
	}
	b, _ := memstore.NewBackend(memstore.Config{Now: now})
	return b
}

// waits collects ObserveWait's calls.
type waits struct {
	mu sync.Mutex
	w  map[string][]time.Duration
}

func (w *waits) observe(ev string, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		w.w = map[string][]time.Duration{}
	}
	w.w[ev] = append(w.w[ev], d)
}

func (w *waits) of(ev string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.w[ev]...)
}

// TestTwoInstancesShareOneHistory: of two instances on one backend, one samples; both read the
// same series; the 429s and 503s each counted add up in the samples; both are listed alive;
// an admission step's waits are the time since the admitted tickets joined. On both backends.
func TestTwoInstancesShareOneHistory(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := storetest.NewClock()
			t0 := clock.Now()
			b := newBackend(t, backend, clock.Now)
			ev := event.Event{ID: "show", MaxActive: 2, Capacity: 10}.WithDefaults()
			_, err := b.Line.PutEvent(ctx, ev.LineConfig(), 1)
			require.NoError(t, err)
			_, err = b.Sale.PutInventory(ctx, ev.Inventory())
			require.NoError(t, err)
			_, err = b.Sale.Restore(ctx, ev.ID, nil, nil)
			require.NoError(t, err)
			var got waits
			newRecorder := func(name string) *Recorder {
				r, err := New(Config{Store: b.History, Leases: b.Leases, Line: b.Line, Sale: b.Sale,
					Events: func() []event.Event { return []event.Event{ev} }, Info: Info{Name: name, Version: "test"},
					ObserveWait: got.observe, Now: clock.Now})
				require.NoError(t, err)
				return r
			}
			x, y := newRecorder("x"), newRecorder("y")
			join := func(n int) []queue.Ticket {
				var out []queue.Ticket
				for range n {
					tk, err := b.Line.Join(ctx, queue.JoinParams{Event: ev.ID})
					require.NoError(t, err)
					out = append(out, tk)
				}
				return out
			}
			first := join(10) // 2 admitted at once, 8 waiting

			require.NoError(t, x.Step(ctx))
			require.NoError(t, y.Step(ctx))
			require.NotEqual(t, x.sampler.Load(), y.sampler.Load(), "exactly one instance samples")
			s, o := x, y // s samples; o steps before it each round, so its counts are in s's sample
			if y.sampler.Load() {
				s, o = y, x
			}
			h, err := o.Event(ctx, ev, time.Time{})
			require.NoError(t, err)
			require.Len(t, h.Samples, 1, "the other instance reads the sampler's series")
			require.Equal(t, history.EventSample{At: t0, Generation: 1, Waiting: 8, Active: 2, MaxActive: 2, Serving: 2,
				AdmittedTotal: 2, LastNumber: 10, Capacity: 10}, h.Samples[0])

			ins := o.Instances()
			require.Len(t, ins, 2)
			names := map[string]bool{}
			for _, in := range ins {
				names[in.Name] = true
				require.Equal(t, in.ID == o.id, in.Self)
				require.Equal(t, "test", in.Version)
			}
			require.Equal(t, map[string]bool{"x": true, "y": true}, names)

			for range 3 {
				x.Count(ev.ID, http.StatusTooManyRequests)
			}
			y.Count(ev.ID, http.StatusTooManyRequests)
			y.Count(ev.ID, http.StatusServiceUnavailable)
			x.Count(ev.ID, http.StatusNotFound)            // not counted
			x.Count("unknown", http.StatusTooManyRequests) // no such event: not counted
			clock.Advance(5 * time.Second)
			join(10)
			require.NoError(t, o.Step(ctx))
			require.NoError(t, s.Step(ctx))
			h, err = o.Event(ctx, ev, t0)
			require.NoError(t, err)
			require.Len(t, h.Samples, 1, "only the samples after since")
			last := h.Samples[0]
			require.Equal(t, t0.Add(5*time.Second), last.At)
			require.Equal(t, int64(4), last.Rejected, "429s of both instances")
			require.Equal(t, int64(1), last.Unavailable)
			require.Equal(t, int64(20), last.LastNumber)
			require.InDelta(t, 2, h.Rates[0].Joins.PerS, 1e-9, "10 joins in 5 s")
			require.InDelta(t, 0.8, h.Rates[0].Rejected, 1e-9, "4 429s in 5 s")
			require.Equal(t, int64(10), h.Forecast.UnitsLeft, "10 units, none sold")
			require.Positive(t, h.Forecast.ClearS)

			// Two people leave at 10 s: the processor admits numbers 3 and 4, who joined at 0 s.
			clock.Advance(5 * time.Second)
			for _, tk := range first[:2] {
				require.NoError(t, b.Line.Leave(ctx, tk.TicketRef))
			}
			res, err := b.Line.Admit(ctx, ev.ID, 0)
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Admitted)
			o.observe(ctx, admitStep{ev.ID, res})
			require.Equal(t, []time.Duration{10 * time.Second, 10 * time.Second}, got.of(ev.ID))

			// The measured figures of the event's life add up over the instances: the waits
			// observed (the processor's, and a join admitted at once on the other), the
			// refusals by kind; the line's own totals are sampled.
			x.Waited(ev.ID, 0)
			x.Refused(ev.ID, "rate_limited")
			y.Refused(ev.ID, "rate_limited")
			y.Refused(ev.ID, "challenge_failed")
			x.Refused(ev.ID, "event_not_found")  // not a refusal of the line's rules
			y.Refused("unknown", "rate_limited") // no such event
			y.Waited("unknown", time.Second)
			require.NoError(t, b.Line.Leave(ctx, first[9].TicketRef), "one leaves while waiting")
			clock.Advance(5 * time.Second)
			require.NoError(t, o.Step(ctx))
			require.NoError(t, s.Step(ctx))
			h, err = o.Event(ctx, ev, t0.Add(5*time.Second))
			require.NoError(t, err)
			last = h.Samples[len(h.Samples)-1]
			require.Equal(t, [4]int64{2, 1, 0, 0}, last.Refusals, "rate limits of both, a challenge failed")
			require.Equal(t, int64(1), last.LeftWaiting)
			require.Zero(t, last.Unclaimed)
			life, err := o.EventLife(ctx, ev.ID, ev.Epoch())
			require.NoError(t, err)
			require.Equal(t, [4]int64{2, 1, 0, 0}, life.Refusals)
			require.Equal(t, int64(3), life.Waits.Count())
			p50, _ := life.Waits.Quantile(0.5)
			require.InEpsilon(t, 10, p50.Seconds(), 0.1, "two of three waited 10 s")
			other, err := o.EventLife(ctx, ev.ID, "another-life")
			require.NoError(t, err)
			require.Zero(t, other.Waits.Count(), "another life of the event counts apart")
		})
	}
}

// TestAdmittedObservesInTheBackground: Start samples at once; an admission step handed to
// Admitted is observed on the recorder's goroutine; Stop ends it (goleak checks), and is safe
// twice and before Start.
func TestAdmittedObservesInTheBackground(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	b := newBackend(t, "memory", clock.Now)
	ev := event.Event{ID: "bg", MaxActive: 1}.WithDefaults()
	_, err := b.Line.PutEvent(ctx, ev.LineConfig(), 1)
	require.NoError(t, err)
	var got waits
	r, err := New(Config{Store: b.History, Line: b.Line, Events: func() []event.Event { return []event.Event{ev} },
		Interval: time.Hour, ObserveWait: got.observe, Now: clock.Now})
	require.NoError(t, err)
	idle, err := New(Config{Store: b.History, Line: b.Line, Events: func() []event.Event { return nil }})
	require.NoError(t, err)
	_ = idle.Stop(context.Background())
	var tickets []queue.Ticket
	for range 3 {
		tk, err := b.Line.Join(ctx, queue.JoinParams{Event: ev.ID})
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	require.NoError(t, r.Start(ctx))
	defer func() { _ = r.Stop(context.Background()) }()
	require.Len(t, r.Instances(), 1, "listed from the start")
	clock.Advance(90 * time.Second)
	require.NoError(t, b.Line.Leave(ctx, tickets[0].TicketRef))
	res, err := b.Line.Admit(ctx, ev.ID, 0)
	require.NoError(t, err)
	r.Admitted(ev.ID, res)
	r.Admitted(ev.ID, queue.AdmitResult{}) // nothing admitted: nothing observed
	eventually.True(t, 10*time.Second, "the wait observed", func() bool { return len(got.of(ev.ID)) == 1 })
	require.Equal(t, 90*time.Second, got.of(ev.ID)[0])
	_ = r.Stop(context.Background())
	_ = r.Stop(context.Background())
}

// TestNumberClockOnlyWhilePeopleJoin: the clock series gets a checkpoint at most a minute, and
// none while the last ticket number stands still.
func TestNumberClockOnlyWhilePeopleJoin(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	b := newBackend(t, "memory", clock.Now)
	ev := event.Event{ID: "cl", MaxActive: 1}.WithDefaults()
	_, err := b.Line.PutEvent(ctx, ev.LineConfig(), 1)
	require.NoError(t, err)
	r, err := New(Config{Store: b.History, Line: b.Line, Events: func() []event.Event { return []event.Event{ev} }, Now: clock.Now})
	require.NoError(t, err)
	checkpoints := func() int {
		es, err := b.History.Range(ctx, history.ClockSeries(ev.ID), time.Time{})
		require.NoError(t, err)
		return len(es)
	}
	join := func() {
		_, err := b.Line.Join(ctx, queue.JoinParams{Event: ev.ID})
		require.NoError(t, err)
	}
	join()
	require.NoError(t, r.Step(ctx))
	require.Equal(t, 1, checkpoints())
	join()
	clock.Advance(30 * time.Second)
	require.NoError(t, r.Step(ctx))
	require.Equal(t, 1, checkpoints(), "not a minute yet")
	clock.Advance(30 * time.Second)
	require.NoError(t, r.Step(ctx))
	require.Equal(t, 2, checkpoints(), "a minute, and people joined")
	clock.Advance(5 * time.Minute)
	require.NoError(t, r.Step(ctx))
	require.Equal(t, 2, checkpoints(), "nobody joined: the last checkpoint still holds")
}

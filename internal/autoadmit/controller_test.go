package autoadmit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/storetest"
)

// TestControllerAcrossInstances: one controller decides at a time (the lease), a new holder
// continues from the stored state instead of starting over, and a missing signal holds the
// last safe value and says so.
func TestControllerAcrossInstances(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	b, _ := memstore.NewBackend(memstore.Config{Now: clock.Now})
	ev := event.Event{ID: "sale", MaxActive: 1000, Auto: event.Auto{Enabled: true, TargetP95: 300 * time.Millisecond,
		MinMaxActive: 10, MaxMaxActive: 1000}}.WithDefaults()
	require.NoError(t, ev.Validate())
	_, err := b.Line.PutEvent(ctx, ev.LineConfig(), 1)
	require.NoError(t, err)
	for i := range 200 { // a crowd: 10 admitted at once (the line starts at min_max_active), the rest wait
		_, err := b.Line.Join(ctx, storetestJoin(ev.ID, i))
		require.NoError(t, err)
	}
	events := func() []event.Event { return []event.Event{ev} }
	newController := func(name string, s *autoadmit.Signals) *autoadmit.Controller {
		c, err := autoadmit.NewController(autoadmit.Config{Store: b.Auto, Leases: b.Leases, Line: b.Line, Signals: s,
			Events: events, History: b.History, Instance: name, Now: clock.Now})
		require.NoError(t, err)
		return c
	}
	sa, sb := &autoadmit.Signals{Now: clock.Now}, &autoadmit.Signals{Now: clock.Now}
	a, c := newController("a", sa), newController("b", sb)
	healthy := func(s *autoadmit.Signals) {
		for i := range 50 {
			s.Observe(ev.ID, int64(i%25+1), testClient(int64(i%25+1)), 50*time.Millisecond, false) // 25 sessions
		}
	}
	state := func() autoadmit.State {
		s, _, err := autoadmit.ReadState(ctx, b.Auto, ev.ID, ev.Auto)
		require.NoError(t, err)
		return s
	}
	step := func(ctl *autoadmit.Controller, s *autoadmit.Signals, feed bool) {
		if feed {
			healthy(s)
		}
		for range 10 { // the admission processor, every 100 ms, fills what the limits allow
			_, err := b.Line.Admit(ctx, ev.ID, 0)
			require.NoError(t, err)
			clock.Advance(100 * time.Millisecond)
		}
		require.NoError(t, ctl.Flush(ctx))
		require.NoError(t, ctl.Step(ctx))
	}
	step(a, sa, true) // a takes the lease: its first step starts a window
	// No change yet: the state's decisions are an empty list, never null (GET …/auto's
	// document says an array; CI read null when it came before the first change).
	first, err := json.Marshal(state())
	require.NoError(t, err)
	require.Contains(t, string(first), `"decisions":[]`)
	step(c, sb, true) // b measures too (its signals count), but does not decide
	require.Equal(t, "a", state().Holder)
	step(a, sa, true) // a window that began while the room filled: no raise on it
	step(a, sa, true)
	raised := state()
	require.Greater(t, raised.MaxActive, int64(10), "healthy and full: raised (%s)", raised.Reason)
	require.Equal(t, "a", raised.Holder)
	// a is gone; once its lease lapses b takes over from the stored state.
	clock.Advance(3 * time.Second)
	step(c, sb, true)
	taken := state()
	require.Equal(t, "b", taken.Holder)
	require.Equal(t, raised.MaxActive, taken.MaxActive, "a new holder neither resets nor doubles the limit")
	require.Equal(t, raised.Seq+1, taken.Seq)
	// No signal for 5 s: the last safe value, said so.
	for range 6 {
		step(c, sb, false)
	}
	quiet := state()
	require.Equal(t, autoadmit.SignalMissing, quiet.Signal, quiet.Reason)
	require.LessOrEqual(t, quiet.MaxActive, taken.MaxActive)
	require.Contains(t, quiet.Reason, "no signal")
	// The stale holder a comes back: it cannot write over b's state while b holds the lease.
	step(a, sa, true)
	require.Equal(t, "b", state().Holder)
}

// TestControllerSharedOrigin: two events naming one auto.origin are judged on the origin's
// whole traffic (each event's load is both events' requests), and the sessions' request rate,
// which would count the other event's requests as this one's sessions', is not measured; one
// event alone on its origin measures it.
func TestControllerSharedOrigin(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	b, _ := memstore.NewBackend(memstore.Config{Now: clock.Now})
	var evs []event.Event
	for _, id := range []string{"shoes", "bags", "alone"} {
		origin := "shop"
		if id == "alone" {
			origin = ""
		}
		ev := event.Event{ID: id, MaxActive: 1000, Auto: event.Auto{Enabled: true, TargetP95: 300 * time.Millisecond,
			MinMaxActive: 10, MaxMaxActive: 1000, Origin: origin}}.WithDefaults()
		require.NoError(t, ev.Validate())
		_, err := b.Line.PutEvent(ctx, ev.LineConfig(), 1)
		require.NoError(t, err)
		for i := range 100 {
			_, err := b.Line.Join(ctx, storetestJoin(ev.ID, i))
			require.NoError(t, err)
		}
		evs = append(evs, ev)
	}
	s := &autoadmit.Signals{Now: clock.Now}
	c, err := autoadmit.NewController(autoadmit.Config{Store: b.Auto, Leases: b.Leases, Line: b.Line, Signals: s,
		Events: func() []event.Event { return evs }, History: b.History, Instance: "a", Now: clock.Now})
	require.NoError(t, err)
	for range 5 { // the lowest p95 takes two windows, the unloaded rate one more, full from its start
		for _, ev := range evs {
			for i := range 50 {
				s.Observe(ev.ID, int64(i%25+1), testClient(int64(i%25+1)), 50*time.Millisecond, false) // 25 sessions
			}
			_, err := b.Line.Admit(ctx, ev.ID, 0)
			require.NoError(t, err)
		}
		clock.Advance(time.Second)
		require.NoError(t, c.Flush(ctx))
		require.NoError(t, c.Step(ctx))
	}
	state := func(id string) autoadmit.State {
		for _, ev := range evs {
			if ev.ID == id {
				st, _, err := autoadmit.ReadState(ctx, b.Auto, ev.ID, ev.Auto)
				require.NoError(t, err)
				return st
			}
		}
		t.Fatalf("no event %s", id)
		return autoadmit.State{}
	}
	for _, id := range []string{"shoes", "bags"} {
		st := state(id)
		require.InDelta(t, 100, st.Load, 1, "%s: both events' requests (%s)", id, st.Reason)
		require.Zero(t, st.SessionRate0, "%s: the origin's load is not this event's sessions'", id)
	}
	alone := state("alone")
	require.InDelta(t, 50, alone.Load, 1)
	require.Positive(t, alone.SessionRate0, "alone on its origin: its sessions' rate is measured (%s)", alone.Reason)
}

func storetestJoin(ev string, i int) queue.JoinParams {
	return queue.JoinParams{Event: ev, UserKey: fmt.Sprint("u", i)}
}

// TestHealthURLIsPolled: the holder GETs the event's health_url, when serve's --health-urls
// allow it, and counts its report; one they do not allow is never requested, and a redirect
// is not followed (it counts as an error), nor is a report that is not valid taken as health.
func TestHealthURLIsPolled(t *testing.T) {
	ctx := context.Background()
	var hits, elsewhere atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/elsewhere":
			elsewhere.Add(1)
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		case "/health/invalid": // more errors than requests: no sign of health
			_, _ = io.WriteString(w, `{"requests": 100, "errors": 150, "p95_ms": 1}`)
			return
		case "/health/unreadable": // a field of the wrong type
			_, _ = io.WriteString(w, `{"requests": 100, "errors": 0, "p95_ms": "5"}`)
			return
		}
		hits.Add(1)
		_, _ = io.WriteString(w, `{"requests": 40, "errors": 2, "p95_ms": 120}`)
	}))
	defer origin.Close()
	b, _ := memstore.NewBackend(memstore.Config{})
	mk := func(id, path string) event.Event {
		ev := event.Event{ID: id, MaxActive: 100, Auto: event.Auto{Enabled: true, HealthURL: origin.URL + path}}.WithDefaults()
		require.NoError(t, ev.Validate())
		return ev
	}
	ev, other, moved, invalid := mk("polled", "/health"), mk("other", "/internal"), mk("moved", "/health/moved"), mk("invalid", "/health/invalid")
	unreadable := mk("unreadable", "/health/unreadable")
	allowed, err := autoadmit.ParseHealthURLs(origin.URL + "/health")
	require.NoError(t, err)
	s := new(autoadmit.Signals)
	c, err := autoadmit.NewController(autoadmit.Config{Store: b.Auto, Leases: b.Leases, Line: b.Line, Signals: s,
		Events: func() []event.Event { return []event.Event{ev, other, moved, invalid, unreadable} }, Instance: "a", HealthURLs: allowed})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	// stored steps and flushes the controller, then reads event id's window from the store.
	stored := func(id string) autoadmit.Window {
		require.NoError(t, c.Step(ctx))
		require.NoError(t, c.Flush(ctx))
		m, err := b.Auto.Signals(ctx, id)
		require.NoError(t, err)
		return autoadmit.FromCounters(m)
	}
	eventually.True(t, 10*time.Second, "the health URL's report in the store", func() bool {
		w := stored(ev.ID)
		return w.Reported >= 40 && w.RepErrors >= 2 && w.P95() == 120
	})
	eventually.True(t, 10*time.Second, "the redirect's error in the store", func() bool {
		return stored(moved.ID).RepErrors >= 1
	})
	for _, e := range []event.Event{invalid, unreadable} {
		eventually.True(t, 10*time.Second, e.ID+" report's error in the store", func() bool {
			w := stored(e.ID)
			require.Equal(t, w.Reported, w.RepErrors, "an %s report counted as health", e.ID)
			return w.RepErrors >= 1
		})
	}
	require.NoError(t, c.Stop(ctx)) // the polls in flight end
	require.Zero(t, elsewhere.Load(), "a redirect was followed")
	m, err := b.Auto.Signals(ctx, other.ID)
	require.NoError(t, err)
	require.Zero(t, autoadmit.FromCounters(m).Reported, "a health URL not allowed was polled")
}

// testClient is session i's client: an address of its own.
func testClient(i int64) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
}

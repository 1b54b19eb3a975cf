package storetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
)

// RunAuto is the conformance suite of admission mode auto's store (autoadmit.Store): signals
// add up across writers, the controller's state is a compare-and-set, and its limits are the
// line's until a configuration outside mode auto replaces them.
func RunAuto(t *testing.T, newBackend BackendFactory) {
	t.Run("SignalsAddUp", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t, nil)
		ctx := context.Background()
		ev := fmt.Sprintf("auto-%d", eventSeq.Add(1))
		m, err := b.Auto.Signals(ctx, ev)
		require.NoError(t, err)
		require.Empty(t, m)
		var wg sync.WaitGroup
		for range 8 { // eight instances flushing at once
			wg.Go(func() {
				for range 10 {
					require.NoError(t, b.Auto.AddSignals(ctx, ev, map[string]int64{"n": 3, "e": 1, "b7": 2}))
				}
			})
		}
		wg.Wait()
		require.NoError(t, b.Auto.AddSignals(ctx, ev, nil))
		m, err = b.Auto.Signals(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"n": 240, "e": 80, "b7": 160}, m)
		other, err := b.Auto.Signals(ctx, ev+"x")
		require.NoError(t, err)
		require.Empty(t, other, "events are apart")
	})
	t.Run("SignalsPastInt64StartAgain", func(t *testing.T) {
		// A running total that an add would take past int64 starts again from that add (a
		// reset, which the controller reads as a count gone down and skips), and the others
		// of the same add are made: the add never fails part-way. On Redis a failed HINCRBY
		// left the adds before it made, and the controller gave the whole delta back to
		// be added again every 250 ms (helper-77: a reporter of huge p95s overflowed rp).
		t.Parallel()
		b := newBackend(t, nil)
		ctx := context.Background()
		ev := fmt.Sprintf("auto-%d", eventSeq.Add(1))
		const big = math.MaxInt64 - 10
		require.NoError(t, b.Auto.AddSignals(ctx, ev, map[string]int64{"n": 1, "rp": big}))
		require.NoError(t, b.Auto.AddSignals(ctx, ev, map[string]int64{"n": 2, "rp": 20, "rn": 5}))
		m, err := b.Auto.Signals(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"n": 3, "rp": 20, "rn": 5}, m)
		require.NoError(t, b.Auto.AddSignals(ctx, ev, map[string]int64{"rp": math.MinInt64 + 1}))
		m, err = b.Auto.Signals(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, int64(math.MinInt64+21), m["rp"], "a negative add within range is made")
		require.NoError(t, b.Auto.AddSignals(ctx, ev, map[string]int64{"rp": -30}))
		m, err = b.Auto.Signals(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, int64(-30), m["rp"], "past the low end too")
	})
	t.Run("ControlIsCompareAndSet", func(t *testing.T) {
		t.Parallel()
		b := newBackend(t, nil)
		ctx := context.Background()
		ev := fmt.Sprintf("auto-%d", eventSeq.Add(1))
		data, seq, err := b.Auto.Control(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, "", data)
		require.Zero(t, seq)
		set := func(seq int64, data string) bool {
			t.Helper()
			ok, err := b.Auto.SetControl(ctx, ev, seq, data, 5, 10)
			require.NoError(t, err)
			return ok
		}
		require.False(t, set(2, "x"), "seq 2 needs 1 stored")
		require.True(t, set(1, `{"a":1}`))
		require.False(t, set(1, `{"a":2}`), "a second writer of the same seq loses")
		require.True(t, set(2, `{"a":3}`))
		data, seq, err = b.Auto.Control(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, `{"a":3}`, data)
		require.Equal(t, int64(2), seq)
		// Concurrent holders of one seq: exactly one writes.
		var mu sync.Mutex
		won := 0
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				ok, err := b.Auto.SetControl(ctx, ev, 3, fmt.Sprint(i), 5, 10)
				require.NoError(t, err)
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, 1, won)
	})
	t.Run("ControlSetsTheLinesLimits", func(t *testing.T) { t.Parallel(); testControlSetsLimits(t, newBackend(t, nil)) })
	t.Run("DeleteEventForgetsAuto", func(t *testing.T) {
		// A deleted event's signals and controller go with it: an event made again under the
		// same id starts its controller afresh (seq 1), and nothing of it stays in the store.
		t.Parallel()
		b := newBackend(t, nil)
		ctx := context.Background()
		cfg := newEvent(t, b.Line, func(c *queue.EventConfig) { c.MaxActive = 1; c.Auto = true })
		require.NoError(t, b.Auto.AddSignals(ctx, cfg.ID, map[string]int64{"n": 3}))
		ok, err := b.Auto.SetControl(ctx, cfg.ID, 1, "{}", 3, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, b.Line.DeleteEvent(ctx, cfg.ID))
		m, err := b.Auto.Signals(ctx, cfg.ID)
		require.NoError(t, err)
		require.Empty(t, m)
		data, seq, err := b.Auto.Control(ctx, cfg.ID)
		require.NoError(t, err)
		require.Equal(t, "", data)
		require.Zero(t, seq)
	})
}

// testControlSetsLimits: SetControl's limits are what the admission step enforces; a later
// configuration in mode auto keeps them, one outside it applies its own.
func testControlSetsLimits(t *testing.T, b store.Backend) {
	ctx := context.Background()
	s := b.Line
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1; c.Auto = true })
	var tickets []queue.Ticket
	for i := range 6 {
		tickets = append(tickets, join(t, s, cfg.ID, fmt.Sprint("u", i)))
	}
	require.Equal(t, queue.StatusAdmitted, tickets[0].Status)
	require.Equal(t, queue.StatusQueued, tickets[1].Status)
	ok, err := b.Auto.SetControl(ctx, cfg.ID, 1, "{}", 3, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(2), admit(t, s, cfg.ID, 0).Admitted, "the controller's max_active 3 holds")
	cfg.Version++
	_, err = s.PutEvent(ctx, cfg, 0) // mode auto, max_active 1 in the configuration
	require.NoError(t, err)
	require.NoError(t, s.Leave(ctx, tickets[0].TicketRef))
	require.Equal(t, int64(1), admit(t, s, cfg.ID, 0).Admitted, "a configuration in mode auto keeps the controller's limits")
	cfg.Version++
	cfg.Auto = false
	_, err = s.PutEvent(ctx, cfg, 0) // mode fixed: max_active 1
	require.NoError(t, err)
	require.NoError(t, s.Leave(ctx, tickets[1].TicketRef))
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "mode fixed: 2 active over max_active 1")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Active)
	ok, err = b.Auto.SetControl(ctx, cfg.ID, 2, "{}", 9, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.Leave(ctx, tickets[2].TicketRef))
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "outside mode auto the controller's limits do not apply")
}

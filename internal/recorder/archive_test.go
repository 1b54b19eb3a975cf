package recorder

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/storetest"
)

// TestLongHistory: the sampler keeps the event's history beyond the store's hour in SQL (here
// SQLite; the statements are proved on both databases in sqlstore): a bucket per minute and
// per ten minutes, each with the last sample of its span, its longest line and the life's
// measured waits; read back with their rates; minute buckets are pruned after a day, ten
// minutes' kept. A sampler that takes over (a new Recorder) goes on in the same buckets.
func TestLongHistory(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	b := newBackend(t, "memory", clock.Now)
	db, err := sqlstore.Open(ctx, sqltest.SQLite(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ev := event.Event{ID: "long", MaxActive: 1, DrawSeed: storetest.TestSeed}.WithDefaults()
	_, err = b.Line.PutEvent(ctx, ev.LineConfig(), 1)
	require.NoError(t, err)
	newRecorder := func() *Recorder {
		r, err := New(Config{Store: b.History, Line: b.Line, Events: func() []event.Event { return []event.Event{ev} },
			Archive: db, Now: clock.Now, Interval: 30 * time.Second})
		require.NoError(t, err)
		return r
	}
	r := newRecorder()
	start := history.SpanStart(clock.Now(), time.Hour).Add(time.Hour) // a whole hour, so the spans line up
	clock.Advance(start.Sub(clock.Now()))

	// 90 minutes, a sample every 30 s, a join before each and a wait of 42 s measured each
	// minute; the line peaks at the 45th minute.
	for i := range 180 {
		_, err := b.Line.Join(ctx, queue.JoinParams{Event: ev.ID})
		require.NoError(t, err)
		if i == 90 {
			r = newRecorder() // another instance takes the sampling over
		}
		require.NoError(t, r.Step(ctx))
		if i%2 == 0 {
			r.Waited(ev.ID, 42*time.Second) // added at the next step
		}
		clock.Advance(30 * time.Second)
	}
	h, maxima, err := r.LongHistory(ctx, ev, history.MinuteSpan, time.Time{})
	require.NoError(t, err)
	require.Len(t, h.Samples, 90, "a bucket a minute")
	require.Len(t, maxima, 90)
	for i, s := range h.Samples {
		require.Equal(t, start.Add(time.Duration(i)*time.Minute+30*time.Second), s.At, "the last sample of minute %d", i)
		require.Equal(t, int64(2*i+2), s.LastNumber)
	}
	require.InDelta(t, 2.0/60, h.Rates[60].Joins.PerS, 1e-9, "two joins a minute")
	require.Equal(t, int64(180), h.Last.LastNumber, "the last sample of the store's window")
	bs, err := db.Buckets(ctx, ev.ID, ev.Epoch(), history.MinuteSpan, time.Time{})
	require.NoError(t, err)
	require.Equal(t, int64(90), bs[89].Waits.Count(), "the life's waits at the minute's end")
	require.Equal(t, int64(179), bs[89].WaitingMax, "one admitted at once, nobody since")
	ten, _, err := r.LongHistory(ctx, ev, history.TenMinuteSpan, time.Time{})
	require.NoError(t, err)
	require.Len(t, ten.Samples, 9)
	require.Equal(t, start.Add(9*time.Minute+30*time.Second), ten.Samples[0].At)
	since, _, err := r.LongHistory(ctx, ev, history.MinuteSpan, h.Samples[87].At)
	require.NoError(t, err)
	require.Len(t, since.Samples, 2)

	// A day later the minutes are pruned; the ten minutes stay for a month.
	for range 26 {
		clock.Advance(time.Hour)
		require.NoError(t, r.Step(ctx))
	}
	h, _, err = r.LongHistory(ctx, ev, history.MinuteSpan, time.Time{})
	require.NoError(t, err)
	require.Less(t, len(h.Samples), 26, "the first 90 minutes are gone")
	last := h.Samples[len(h.Samples)-1].At
	require.False(t, h.Samples[0].At.Before(last.Add(-history.MinuteKeep-time.Minute)), "no minute older than a day before the last")
	ten, _, err = r.LongHistory(ctx, ev, history.TenMinuteSpan, time.Time{})
	require.NoError(t, err)
	require.Equal(t, start.Add(9*time.Minute+30*time.Second), ten.Samples[0].At, "still there")

	none, err := New(Config{Store: b.History, Line: b.Line, Events: func() []event.Event { return nil }})
	require.NoError(t, err)
	_, _, err = none.LongHistory(ctx, ev, history.MinuteSpan, time.Time{})
	require.ErrorIs(t, err, ErrNoArchive)
}

// swapLine and swapHistory let a test replace the stores under a running Recorder (Redis
// restarted empty while the instance runs).
type swapLine struct{ queue.Store }
type swapHistory struct{ history.Store }

// TestLongHistoryKeepsACrashedMinute: the store's counts start again within a minute (the
// embedded process killed and started again, or Redis restarted empty under a running
// instance). The minute's bucket keeps its last sample before, and the next minute's counts,
// measured since, follow it: the long history's admissions add up. Before (helper-83), the
// first sample after the restart overwrote the minute's bucket, and the report read 3
// admissions for 6.
func TestLongHistoryKeepsACrashedMinute(t *testing.T) {
	for _, inProcess := range []bool{false, true} {
		t.Run(map[bool]string{false: "restart", true: "in process"}[inProcess], func(t *testing.T) {
			ctx := context.Background()
			clock := storetest.NewClock()
			db, err := sqlstore.Open(ctx, sqltest.SQLite(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			ev := event.Event{ID: "crashed", MaxActive: 100}.WithDefaults()
			line, hist := &swapLine{}, &swapHistory{}
			crash := func() { // a store with nothing in it: its counts start again
				b := newBackend(t, "memory", clock.Now)
				line.Store, hist.Store = b.Line, b.History
				_, err := b.Line.PutEvent(ctx, ev.LineConfig(), 1)
				require.NoError(t, err)
			}
			admit := func(n int) {
				for range n {
					_, err := line.Join(ctx, queue.JoinParams{Event: ev.ID})
					require.NoError(t, err)
				}
				_, err := line.Admit(ctx, ev.ID, 0)
				require.NoError(t, err)
			}
			newRecorder := func() *Recorder {
				r, err := New(Config{Store: hist, Line: line, Events: func() []event.Event { return []event.Event{ev} },
					Archive: db, Now: clock.Now, Interval: 5 * time.Second})
				require.NoError(t, err)
				return r
			}
			crash()
			start := history.SpanStart(clock.Now(), time.Hour).Add(time.Hour)
			clock.Advance(start.Sub(clock.Now()) + 5*time.Second)
			r := newRecorder()
			require.NoError(t, r.Step(ctx)) // the minute's first sample: written
			admit(6)
			clock.Advance(20 * time.Second)
			require.NoError(t, r.Step(ctx)) // 15 s on: written, 6 admitted
			admit(2)
			clock.Advance(5 * time.Second)
			require.NoError(t, r.Step(ctx)) // 8 admitted, not written yet (ArchiveEvery)

			crash()
			if !inProcess {
				r = newRecorder()
			}
			admit(3)
			clock.Advance(10 * time.Second)
			require.NoError(t, r.Step(ctx)) // 3 admitted since the counts started again
			clock.Advance(20 * time.Second)
			require.NoError(t, r.Step(ctx))
			admit(2)
			clock.Advance(30 * time.Second) // the next minute
			require.NoError(t, r.Step(ctx))

			bs, err := db.Buckets(ctx, ev.ID, ev.Epoch(), history.MinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Len(t, bs, 2)
			admitted := []int64{bs[0].Sample.AdmittedTotal, bs[1].Sample.AdmittedTotal}
			if inProcess { // the sampler saw the counts fall: the minute keeps the last sample before
				require.Equal(t, []int64{8, 5}, admitted, "the minute keeps its 8; the next counts 5 since the restart")
				require.Equal(t, []float64{8, 13}, history.Unwrap(admitted), "13 admitted in all")
				return
			}
			// A new process: the minute keeps the last sample written before the crash (the 2
			// admitted after it, within ArchiveEvery, are lost with the process).
			require.Equal(t, []int64{6, 5}, admitted, "the crashed minute keeps its 6; the next counts 5 since the restart")
			require.Equal(t, []float64{6, 11}, history.Unwrap(admitted), "11 of 13 admitted in all")
		})
	}
}

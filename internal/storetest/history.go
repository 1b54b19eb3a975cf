package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/history"
)

// HistoryFactory returns a fresh, empty history store whose clock is now (nil: the store's
// own). It registers its own cleanup with t.
type HistoryFactory func(t *testing.T, now func() time.Time) history.Store

// RunHistory runs the history conformance suite against the stores newStore makes.
func RunHistory(t *testing.T, newStore HistoryFactory) {
	runSuite(t, newStore, []suiteTest[HistoryFactory]{
		{"SeriesKeepTheirWindow", testSeriesKeepTheirWindow},
		{"CountersAddUpAcrossWriters", testCountersAddUpAcrossWriters},
		{"InstancesAliveUntilTheirBeatRunsOut", testInstancesAlive},
	})
}

// testSeriesKeepTheirWindow: samples come back in time order from since on; those older than
// keep before the last append are dropped; series are apart; the same sample twice is kept once.
func testSeriesKeepTheirWindow(t *testing.T, newStore HistoryFactory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	t0 := clock.Now()
	series := fmt.Sprintf("e:hist-%d", eventSeq.Add(1))
	got, err := s.Range(ctx, series, time.Time{})
	require.NoError(t, err)
	require.Empty(t, got, "a series that does not exist is empty")
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// Out of order on purpose: the store orders by time, not by arrival.
	for _, sec := range []int{0, 10, 5, 15, 20} {
		require.NoError(t, s.Append(ctx, series, at(sec), fmt.Sprint("1,", sec), time.Minute))
	}
	require.NoError(t, s.Append(ctx, series, at(20), "1,20", time.Minute)) // a repeat
	require.NoError(t, s.Append(ctx, series, at(20), "1,20|b", time.Minute))
	require.NoError(t, s.Append(ctx, "e:other", at(20), "1,other", time.Minute))
	got, err = s.Range(ctx, series, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []history.Entry{{At: at(0), Data: "1,0"}, {At: at(5), Data: "1,5"}, {At: at(10), Data: "1,10"},
		{At: at(15), Data: "1,15"}, {At: at(20), Data: "1,20"}, {At: at(20), Data: "1,20|b"}}, got)
	got, err = s.Range(ctx, series, at(12))
	require.NoError(t, err)
	require.Len(t, got, 3, "from since on")
	require.Equal(t, at(15), got[0].At)

	// Appending at 70 s drops what is older than 70 - 60 = 10 s.
	require.NoError(t, s.Append(ctx, series, at(70), "1,70", time.Minute))
	got, err = s.Range(ctx, series, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []time.Time{at(10), at(15), at(20), at(20), at(70)}, times(got))
}

func times(es []history.Entry) []time.Time {
	out := make([]time.Time, len(es))
	for i, e := range es {
		out[i] = e.At
	}
	return out
}

// testCountersAddUpAcrossWriters: concurrent adds of several writers (instances) sum up; the
// counters of two series are apart.
func testCountersAddUpAcrossWriters(t *testing.T, newStore HistoryFactory) {
	ctx := context.Background()
	s := newStore(t, nil)
	series := fmt.Sprintf("e:count-%d", eventSeq.Add(1))
	c, err := s.Counters(ctx, series)
	require.NoError(t, err)
	require.Empty(t, c)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 50 {
				if err := s.Add(ctx, series, map[string]int64{history.CounterRejected: 2, history.CounterUnavailable: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Add(ctx, series+"-x", map[string]int64{history.CounterRejected: 7}))
	require.NoError(t, s.Add(ctx, series, nil))
	c, err = s.Counters(ctx, series)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{history.CounterRejected: 300, history.CounterUnavailable: 150}, c)
}

// testInstancesAlive: an instance counts as alive until its beat's ttl runs out; each beat
// lists those alive, by id.
func testInstancesAlive(t *testing.T, newStore HistoryFactory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	beat := func(id string, ttl time.Duration) []history.Instance {
		t.Helper()
		alive, err := s.Beat(ctx, id, `{"name":"`+id+`"}`, ttl)
		require.NoError(t, err)
		return alive
	}
	require.Equal(t, []history.Instance{{ID: "b", Info: `{"name":"b"}`, Until: clock.Now().Add(15 * time.Second)}}, beat("b", 15*time.Second))
	clock.Advance(5 * time.Second)
	alive := beat("a", 15*time.Second)
	require.Len(t, alive, 2)
	require.Equal(t, []string{"a", "b"}, []string{alive[0].ID, alive[1].ID})
	require.Equal(t, clock.Now().Add(15*time.Second), alive[0].Until)
	clock.Advance(10 * time.Second) // b's beat ran out just now
	alive = beat("a", 15*time.Second)
	require.Len(t, alive, 1, "b stopped beating")
	require.Equal(t, "a", alive[0].ID)
	alive = beat("b", 15*time.Second)
	require.Len(t, alive, 2, "b is back")
}

// HistoryBenchCases are the benchmarks of history.Store, each a b.RunParallel on one hot
// series: the sampler's append (one per event per interval in production, so this measures
// headroom), every instance's counter adds and heartbeats, and a read of an hour of samples
// (720, what a console's first look at an event costs).
var HistoryBenchCases = []BenchCase[history.Store]{
	{"Append", func(b *testing.B, s history.Store) {
		series := fmt.Sprintf("e:bench-%d", eventSeq.Add(1))
		t0 := time.Now()
		var n atomic.Int64
		b.SetParallelism(BenchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				data := history.EventSample{Waiting: i, LastNumber: i, AdmittedTotal: i}.Encode()
				if err := s.Append(context.Background(), series, t0.Add(time.Duration(i)*time.Millisecond), data, time.Hour); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}},
	{"Add", func(b *testing.B, s history.Store) {
		series := fmt.Sprintf("e:bench-%d", eventSeq.Add(1))
		b.SetParallelism(BenchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Add(context.Background(), series, map[string]int64{history.CounterRejected: 3, history.CounterUnavailable: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}},
	{"Beat", func(b *testing.B, s history.Store) {
		var n atomic.Int64
		b.SetParallelism(BenchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			id := fmt.Sprintf("instance-%d", n.Add(1)%3) // three instances
			for pb.Next() {
				if _, err := s.Beat(context.Background(), id, `{"name":"bench"}`, 15*time.Second); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}},
	{"RangeHour", func(b *testing.B, s history.Store) {
		series := fmt.Sprintf("e:bench-%d", eventSeq.Add(1))
		t0 := time.Now().Add(-time.Hour)
		for i := range 720 {
			data := history.EventSample{Waiting: int64(i), LastNumber: int64(i)}.Encode()
			require.NoError(b, s.Append(context.Background(), series, t0.Add(time.Duration(i)*5*time.Second), data, 2*time.Hour))
		}
		b.SetParallelism(BenchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				es, err := s.Range(context.Background(), series, time.Time{})
				if err != nil || len(es) != 720 {
					b.Errorf("range: %d samples, %v", len(es), err)
					return
				}
			}
		})
	}},
}

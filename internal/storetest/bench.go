package storetest

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
)

// The shared benchmarks: the hot paths of every backend, each a b.RunParallel on one hot event,
// run by the backends' *_bench_test.go files:
//
//	go test -run '^$' -bench . ./internal/memstore/ ./internal/redisstore/
//
// The test command does not run benchmarks; BenchSmoke runs each body once instead (b.N = 1),
// so that they cannot rot.
//
// To add a benchmark for another store interface (hold, book, coupon entry), declare a
// []BenchCase[S] for it and call RunBench and BenchSmoke with a factory of S, as Bench and
// BenchSmokeLine do for queue.Store.

// BenchParallelism is the number of goroutines per GOMAXPROCS that each b.RunParallel runs:
// many calls in flight, as a server answering many requests at once has, which is what lets
// the Redis client pipeline them.
const BenchParallelism = 64

// BenchCase is one benchmark of a store of type S.
type BenchCase[S any] struct {
	Name string
	Run  func(b *testing.B, s S)
}

// BenchFactory returns a fresh, empty store on its own clock (Redis TIME for the Redis store,
// as in production). It registers its own cleanup with tb.
type BenchFactory func(tb testing.TB) queue.Store

// LineBenchCases are the benchmarks of queue.Store.
var LineBenchCases = []BenchCase[queue.Store]{
	{"Join", benchJoin},
	{"JoinNamed", benchJoinNamed},
	{"JoinLimited", benchJoinLimited},
	{"Status", benchStatus},
	{"PollLimited", func(b *testing.B, s queue.Store) { benchStatusWith(b, s, time.Hour) }},
	{"Admit/batch=50", func(b *testing.B, s queue.Store) { benchAdmit(b, s, 50) }},
	{"Admit/batch=5000", func(b *testing.B, s queue.Store) { benchAdmit(b, s, 5000) }},
}

// Bench runs LineBenchCases, each on a fresh store from newStore.
func Bench(b *testing.B, newStore BenchFactory) {
	RunBench(b, LineBenchCases, func(tb testing.TB) queue.Store { return newStore(tb) })
}

// BenchSmokeLine runs each of LineBenchCases once (see BenchSmoke).
func BenchSmokeLine(t *testing.T, newStore BenchFactory) {
	BenchSmoke(t, LineBenchCases, func(tb testing.TB) queue.Store { return newStore(tb) })
}

// RunBench runs each case as a sub-benchmark on a fresh store from newStore.
func RunBench[S any](b *testing.B, cases []BenchCase[S], newStore func(tb testing.TB) S) {
	for _, c := range cases {
		b.Run(c.Name, func(b *testing.B) { c.Run(b, newStore(b)) })
	}
}

// benchTimeMu serialises BenchSmoke's use of the -test.benchtime flag.
var benchTimeMu sync.Mutex

// BenchSmoke runs each case's body once (b.N = 1) as a subtest, through testing.Benchmark
// with -test.benchtime set to 1x for the call (then restored), and fails the subtest when the
// benchmark failed. It is how the test command keeps the benchmarks compiling and working
// without paying for them.
func BenchSmoke[S any](t *testing.T, cases []BenchCase[S], newStore func(tb testing.TB) S) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			s := newStore(t)
			benchTimeMu.Lock()
			defer benchTimeMu.Unlock()
			f := flag.Lookup("test.benchtime")
			require.NotNil(t, f, "the testing flags are not registered")
			old := f.Value.String()
			require.NoError(t, flag.Set("test.benchtime", "1x"))
			defer func() { _ = flag.Set("test.benchtime", old) }()
			var failed atomic.Bool
			r := testing.Benchmark(func(b *testing.B) {
				defer func() {
					if b.Failed() {
						failed.Store(true)
					}
				}()
				c.Run(b, s)
			})
			if failed.Load() || r.N == 0 {
				t.Fatalf("benchmark %s failed (run it with go test -bench to see why)", c.Name)
			}
		})
	}
}

var benchUser atomic.Uint64

// benchEvent creates an event for one benchmark: max_active as given, everything else default.
func benchEvent(tb testing.TB, s queue.Store, maxActive int64) string {
	tb.Helper()
	id := fmt.Sprintf("bench-%d", eventSeq.Add(1))
	_, err := s.PutEvent(context.Background(), LineConfig(id, maxActive), 1)
	require.NoError(tb, err)
	return id
}

// BenchUserKey returns a fresh 16-byte user key (the size of token.UserKey's digests).
func BenchUserKey() string {
	var k [16]byte
	copy(k[:8], "benchusr")
	binary.BigEndian.PutUint64(k[8:], benchUser.Add(1))
	return string(k[:])
}

// FillLine appends n anonymous tickets to event's line, from 64 goroutines so that a Redis
// client pipelines them, and returns the last ticket seen (its Generation names the line).
// It stops at the first error, or after a minute.
func FillLine(ctx context.Context, s queue.Store, event string, n int) (queue.Ticket, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		last queue.Ticket
		ferr error
	)
	for range 64 {
		wg.Go(func() {
			var mine queue.Ticket
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t, err := s.Join(ctx, queue.JoinParams{Event: event})
				if err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
					cancel()
					return
				}
				if t.Number > mine.Number {
					mine = t
				}
			}
			mu.Lock()
			if mine.Number > last.Number {
				last = mine
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if ferr == nil && ctx.Err() != nil {
		ferr = fmt.Errorf("fill %d tickets: %w", n, ctx.Err())
	}
	return last, ferr
}

// benchJoin: anonymous joins on one hot event whose single slot is taken, so that every join
// queues: the flash crowd.
func benchJoin(b *testing.B, s queue.Store) {
	ctx := context.Background()
	ev := benchEvent(b, s, 1)
	b.SetParallelism(BenchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Join(ctx, queue.JoinParams{Event: ev}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchJoinLimited: benchJoin with the limit per client on (1,000 client addresses, a limit
// none of them reaches): the cost of the check inside the join step, against Join.
func benchJoinLimited(b *testing.B, s queue.Store) {
	ctx := context.Background()
	ev := benchEvent(b, s, 1)
	clients := make([]string, 1000)
	for i := range clients {
		clients[i] = fmt.Sprintf("198.51.%d.%d", i/256, i%256)
	}
	var next atomic.Int64
	b.SetParallelism(BenchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := queue.JoinParams{Event: ev, ClientKey: clients[next.Add(1)%int64(len(clients))],
				JoinLimit: 1_000_000_000, JoinWindow: time.Hour}
			if _, err := s.Join(ctx, p); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchJoinNamed: joins of distinct named users (16-byte keys) on one hot event.
func benchJoinNamed(b *testing.B, s queue.Store) {
	ctx := context.Background()
	ev := benchEvent(b, s, 1)
	b.SetParallelism(BenchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Join(ctx, queue.JoinParams{Event: ev, UserKey: BenchUserKey()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchStatusLine is the length of the line the status benchmark reads from.
const benchStatusLine = 10_000

// benchStatus: status polls of random waiting tickets of a line of 10,000.
func benchStatus(b *testing.B, s queue.Store) { benchStatusWith(b, s, 0) }

// benchStatusWith is benchStatus; with a window > 0 the polls go through Poll with a limit per
// ticket none reaches (PollLimited): the cost of the count inside the status step.
func benchStatusWith(b *testing.B, s queue.Store, window time.Duration) {
	ctx := context.Background()
	ev := benchEvent(b, s, 1)
	last, err := FillLine(ctx, s, ev, benchStatusLine)
	require.NoError(b, err)
	gen := last.Generation
	b.SetParallelism(BenchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		for pb.Next() {
			// Ticket 1 holds the slot; 2..n wait.
			ref := queue.TicketRef{Event: ev, Generation: gen, Number: 2 + r.Int64N(benchStatusLine-1)}
			var err error
			if window > 0 {
				_, err = s.Poll(ctx, queue.PollParams{Ref: ref, Limit: 1_000_000_000, Window: window})
			} else {
				_, err = s.Status(ctx, ref)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchAdmit: one admission step admitting k from the head of a line. Each iteration first
// appends k tickets (so the line never runs out), then admits k; ns/op counts both, and the
// admit-ns/op metric is the admission step alone, which must not grow with k.
func benchAdmit(b *testing.B, s queue.Store, k int) {
	ctx := context.Background()
	ev := benchEvent(b, s, 1)
	// Ticket 1 takes the slot, so that the k+1 after it queue; with the line never empty from
	// then on, joins keep queueing once the slots are opened up.
	_, err := FillLine(ctx, s, ev, k+2)
	require.NoError(b, err)
	_, err = s.PutEvent(ctx, LineConfig(ev, 100_000_000), 1)
	require.NoError(b, err)
	var admitting time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			if _, err := FillLine(ctx, s, ev, k); err != nil {
				b.Fatal(err)
			}
		}
		// A cheap call first, so that the timed one does not pay for the fill's goroutines
		// winding down or for a cold connection.
		if _, err := s.Stats(ctx, ev); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		r, err := s.Admit(ctx, ev, int64(k))
		admitting += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if r.Admitted != int64(k) {
			b.Fatalf("admitted %d, want %d", r.Admitted, k)
		}
	}
	b.ReportMetric(float64(admitting.Nanoseconds())/float64(b.N), "admit-ns/op")
}

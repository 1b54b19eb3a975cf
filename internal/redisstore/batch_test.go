package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/storetest"
)

// batchClients runs f on standalone Redis and, with TEST_REDIS_CLUSTER_URL, on Redis Cluster.
func batchClients(t *testing.T, f func(t *testing.T, c rueidis.Client)) {
	t.Run("redis", func(t *testing.T) { f(t, testClient(t)) })
	t.Run("cluster", func(t *testing.T) {
		url := os.Getenv("TEST_REDIS_CLUSTER_URL")
		if url == "" {
			t.Skip("TEST_REDIS_CLUSTER_URL not set")
		}
		c, err := Dial(url)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		f(t, c)
	})
}

// batchStore is a Store on c under a fresh prefix (deleted at cleanup), its clock stubbed at a
// fixed time (so that a join limit's window cannot turn during a test), with event "b" (max
// active 1).
func batchStore(t *testing.T, c rueidis.Client) *Store {
	t.Helper()
	return batchStoreAt(t, c, time.Now())
}

// batchStoreAt is batchStore with its clock stopped at at.
func batchStoreAt(t *testing.T, c rueidis.Client, at time.Time) *Store {
	t.Helper()
	return batchStoreWith(t, c, at, storetest.LineConfig("b", 1))
}

// batchStoreWith is batchStoreAt with event "b" configured as cfg.
func batchStoreWith(t *testing.T, c rueidis.Client, at time.Time, cfg queue.EventConfig) *Store {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "wrtest-batch-" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() { _ = DeletePrefix(context.Background(), c, prefix) })
	s, err := New(Config{Client: c, Prefix: prefix, Now: func() time.Time { return at }})
	require.NoError(t, err)
	_, err = s.PutEvent(context.Background(), cfg, 1)
	require.NoError(t, err)
	return s
}

// hold marks event b's batcher busy, as while a call is in flight: the joins that come now
// queue until release.
func hold(s *Store) *joinBatcher {
	b := s.joins.get("b")
	b.mu.Lock()
	b.busy = true
	b.mu.Unlock()
	return b
}

// queued waits (up to 10 s) until n joins are queued in b.
func queued(t *testing.T, b *joinBatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		got := len(b.queue)
		b.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d joins queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type joinResult struct {
	t   queue.Ticket
	err error
}

// joinAll makes joins on event "b" of s in order, one by one or (batched) queued behind a
// call held in flight and then sent as one batch, and returns their results in order; at, when
// not nil, runs before join i is made (a test's clock).
func joinAll(t *testing.T, s *Store, batched bool, joins []queue.JoinParams, at func(i int)) []joinResult {
	t.Helper()
	ctx := context.Background()
	out := make([]chan joinResult, len(joins))
	var b *joinBatcher
	calls := s.joins.calls.Load()
	if batched {
		b = hold(s)
	}
	for i, p := range joins {
		if at != nil {
			at(i)
		}
		p.Event = "b"
		out[i] = make(chan joinResult, 1)
		if !batched {
			tk, err := s.Join(ctx, p)
			out[i] <- joinResult{tk, err}
			continue
		}
		go func() {
			tk, err := s.Join(ctx, p)
			out[i] <- joinResult{tk, err}
		}()
		queued(t, b, i+1)
	}
	if batched {
		s.handOff(b, "b")
	}
	res := make([]joinResult, len(joins))
	for i := range out {
		res[i] = <-out[i]
	}
	if batched {
		require.Equal(t, int64(1), s.joins.calls.Load()-calls, "one call")
	}
	return res
}

// TestJoinBatchStress: joins from 32 goroutines at once, each with its own idempotency key:
// every join gets a ticket, the numbers are 1..N without a gap or a repeat, and each join got
// its own ticket (a retry with its key finds that number).
func TestJoinBatchStress(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		ctx := context.Background()
		const workers, each = 32, 40
		numbers := make([][]int64, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					p := queue.JoinParams{Event: "b", IdempotencyKey: fmt.Sprintf("k-%d-%d", w, i)}
					if i%2 == 1 {
						p.IdempotencyKey = "" // plain joins and keyed ones in the same batches
					}
					tk, err := s.Join(ctx, p)
					if err != nil {
						t.Errorf("join: %v", err)
						return
					}
					if !tk.Created {
						t.Errorf("join %d-%d: ticket %d not created", w, i, tk.Number)
					}
					numbers[w] = append(numbers[w], tk.Number)
				}
			}()
		}
		wg.Wait()
		var all []int64
		for _, ns := range numbers {
			require.True(t, slices.IsSorted(ns), "one goroutine's joins in its order: %v", ns)
			all = append(all, ns...)
		}
		slices.Sort(all)
		require.Len(t, all, workers*each)
		for i, n := range all {
			require.Equal(t, int64(i+1), n, "numbers 1..N, each once")
		}
		for w := range workers {
			for i := 0; i < each; i += 2 {
				tk, err := s.Join(ctx, queue.JoinParams{Event: "b", IdempotencyKey: fmt.Sprintf("k-%d-%d", w, i)})
				require.NoError(t, err)
				require.False(t, tk.Created)
				require.Equal(t, numbers[w][i], tk.Number, "join %d-%d's retry finds the ticket its join was told", w, i)
			}
		}
		t.Logf("%d joins, %d of them in %d batched calls", workers*each, s.joins.joins.Load(), s.joins.calls.Load())
	})
}

// TestJoinBatchOrder: the joins queued behind a call in flight go as one call when it ends, and
// take their numbers in the order they came, each answered with its own ticket.
func TestJoinBatchOrder(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		ctx := context.Background()
		b := hold(s)
		const n = 40
		out := make([]chan joinResult, n)
		for i := range n {
			out[i] = make(chan joinResult, 1)
			go func() {
				tk, err := s.Join(ctx, queue.JoinParams{Event: "b", UserKey: fmt.Sprintf("user-%02d", i)})
				out[i] <- joinResult{tk, err}
			}()
			queued(t, b, i+1) // the next comes after this one
		}
		s.handOff(b, "b")
		for i := range n {
			r := <-out[i]
			require.NoError(t, r.err)
			require.Equal(t, int64(i+1), r.t.Number, "join %d", i)
			require.True(t, r.t.Created)
			if i == 0 {
				require.Equal(t, queue.StatusAdmitted, r.t.Status, "the first is admitted at once (max_active 1)")
				require.Equal(t, "user-00", r.t.UserKey)
			} else {
				require.Equal(t, queue.StatusQueued, r.t.Status)
				require.Equal(t, int64(i), r.t.Position, "join %d: behind the %d before it", i, i)
			}
		}
		require.Equal(t, int64(1), s.joins.calls.Load(), "one call")
		require.Equal(t, int64(n), s.joins.joins.Load())
		// Each user's ticket is the one it was told: a join again gives it back.
		for i := range n {
			tk, err := s.Join(ctx, queue.JoinParams{Event: "b", UserKey: fmt.Sprintf("user-%02d", i)})
			require.NoError(t, err)
			require.False(t, tk.Created)
			require.Equal(t, int64(i+1), tk.Number)
		}
		requireIdle(t, b)
	})
}

func requireIdle(t *testing.T, b *joinBatcher) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		busy, q := b.busy, len(b.queue)
		b.mu.Unlock()
		if !busy && q == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("batcher still busy (%d queued)", q)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestJoinBatchLimit: a client's join limit is exact across the joins of one batch: of 60
// joins of one client with a limit of 20, 20 make tickets and 40 are refused.
func TestJoinBatchLimit(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		ctx := context.Background()
		b := hold(s)
		const n = 60
		out := make(chan joinResult, n)
		for range n {
			go func() {
				tk, err := s.Join(ctx, queue.JoinParams{Event: "b", ClientKey: "10.0.0.1", JoinLimit: 20, JoinWindow: time.Hour})
				out <- joinResult{tk, err}
			}()
		}
		queued(t, b, n)
		s.handOff(b, "b")
		var numbers []int64
		refused := 0
		for range n {
			r := <-out
			var rl *queue.RateLimitedError
			switch {
			case errors.As(r.err, &rl):
				refused++
				require.Positive(t, rl.RetryAfter)
			case r.err != nil:
				t.Fatalf("join: %v", r.err)
			default:
				numbers = append(numbers, r.t.Number)
			}
		}
		slices.Sort(numbers)
		require.Equal(t, 40, refused)
		require.Len(t, numbers, 20)
		for i, nb := range numbers {
			require.Equal(t, int64(i+1), nb)
		}
		require.Equal(t, int64(1), s.joins.calls.Load(), "one call")
		// The bucket is empty after the batch: the next join of the client is refused too.
		_, err := s.Join(ctx, queue.JoinParams{Event: "b", ClientKey: "10.0.0.1", JoinLimit: 20, JoinWindow: time.Hour})
		var rl *queue.RateLimitedError
		require.ErrorAs(t, err, &rl)
		requireIdle(t, b)
	})
}

// TestJoinBatchCancel: a join whose context ends while it is queued returns the context's
// error and takes no number; the others of its batch are made.
func TestJoinBatchCancel(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		b := hold(s)
		const n = 12
		out := make([]chan joinResult, n)
		cancels := make([]context.CancelFunc, n)
		for i := range n {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			out[i], cancels[i] = make(chan joinResult, 1), cancel
			go func() {
				tk, err := s.Join(ctx, queue.JoinParams{Event: "b"})
				out[i] <- joinResult{tk, err}
			}()
		}
		queued(t, b, n)
		for i := 0; i < n; i += 3 {
			cancels[i]()
			r := <-out[i]
			require.ErrorIs(t, r.err, context.Canceled)
		}
		queued(t, b, n-(n+2)/3)
		s.handOff(b, "b")
		var numbers []int64
		for i := range n {
			if i%3 == 0 {
				continue
			}
			r := <-out[i]
			require.NoError(t, r.err)
			numbers = append(numbers, r.t.Number)
		}
		slices.Sort(numbers)
		for i, nb := range numbers {
			require.Equal(t, int64(i+1), nb, "the cancelled joins took no number")
		}
		st, err := s.Stats(context.Background(), "b")
		require.NoError(t, err)
		require.Equal(t, int64(len(numbers)), st.LastNumber)
		requireIdle(t, b)
	})
}

// TestJoinBatchFailures: a join of a batch refused on its own (a retry that finds no ticket)
// fails alone; a Redis error fails every join of the batch, and the batcher goes on afterwards.
func TestJoinBatchFailures(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		ctx := context.Background()
		b := hold(s)
		const n = 10
		out := make([]chan joinResult, n)
		for i := range n {
			out[i] = make(chan joinResult, 1)
			go func() {
				p := queue.JoinParams{Event: "b"}
				if i%2 == 1 {
					p.IdempotencyKey, p.RetryOnly = fmt.Sprintf("never-%d", i), true
				}
				tk, err := s.Join(ctx, p)
				out[i] <- joinResult{tk, err}
			}()
			queued(t, b, i+1) // in this order
		}
		s.handOff(b, "b")
		for i := range n {
			r := <-out[i]
			if i%2 == 1 {
				require.ErrorIs(t, r.err, queue.ErrChallengeUsed, "join %d", i)
			} else {
				require.NoError(t, r.err, "join %d", i)
				require.Equal(t, int64(i/2+1), r.t.Number)
			}
		}
		requireIdle(t, b)

		// The line's hash replaced by a string: every script call on it fails (WRONGTYPE).
		ev := s.lineKeys("b")[0]
		require.NoError(t, c.Do(ctx, c.B().Rename().Key(ev).Newkey(ev+":saved").Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Set().Key(ev).Value("x").Build()).Error())
		hold(s)
		for i := range n {
			go func() {
				tk, err := s.Join(ctx, queue.JoinParams{Event: "b"})
				out[i] <- joinResult{tk, err}
			}()
		}
		queued(t, b, n)
		s.handOff(b, "b")
		for i := range n {
			r := <-out[i]
			require.ErrorContains(t, r.err, "WRONGTYPE", "join %d", i)
		}
		requireIdle(t, b)
		require.NoError(t, c.Do(ctx, c.B().Rename().Key(ev+":saved").Newkey(ev).Build()).Error())
		tk, err := s.Join(ctx, queue.JoinParams{Event: "b"})
		require.NoError(t, err)
		require.Equal(t, int64(n/2+1), tk.Number)
	})
}

// TestJoinBatchChallenges: joins carrying a challenge are batched with those of the same bucket
// of used challenges (one call), each still single use inside the batch (the second join with
// an id already used is refused, and takes no number); a join of another bucket waits for the
// next call, and plain joins queued among them go in the call of the first queued join's kind.
func TestJoinBatchChallenges(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		ctx := context.Background()
		b := hold(s)
		exp := time.Now().Add(time.Minute)
		joins := []queue.JoinParams{
			{Event: "b", ClientKey: "c1", ChallengeID: "ch-1", ChallengeExpires: exp},
			{Event: "b", ClientKey: "c2", ChallengeID: "ch-2", ChallengeExpires: exp},
			{Event: "b"}, // plain: the next call
			{Event: "b", ClientKey: "c3", ChallengeID: "ch-1", ChallengeExpires: exp},                // used in this batch
			{Event: "b", ClientKey: "c4", ChallengeID: "ch-3", ChallengeExpires: exp.Add(time.Hour)}, // another bucket
			{Event: "b", ClientKey: "c5", ChallengeID: "ch-4", ChallengeExpires: exp},
		}
		out := make([]chan joinResult, len(joins))
		for i, p := range joins {
			out[i] = make(chan joinResult, 1)
			go func() {
				tk, err := s.Join(ctx, p)
				out[i] <- joinResult{tk, err}
			}()
			queued(t, b, i+1) // in this order
		}
		calls := s.joins.calls.Load()
		s.handOff(b, "b")
		got := make([]joinResult, len(joins))
		for i := range joins {
			got[i] = <-out[i]
		}
		requireIdle(t, b)
		require.Equal(t, int64(3), s.joins.calls.Load()-calls, "the 4 joins of one bucket, then the plain one, then the other bucket's")
		require.ErrorIs(t, got[3].err, queue.ErrChallengeUsed, "single use inside a batch")
		for i, want := range map[int]int64{0: 1, 1: 2, 5: 3, 2: 4, 4: 5} {
			require.NoError(t, got[i].err, "join %d", i)
			require.Equal(t, want, got[i].t.Number, "join %d", i)
		}
	})
}

// TestJoinBatchAsOneByOne: a batch's joins are answered as the same joins made one by one
// (join.lua each): the batch keeps the event's fields and the count of tickets that left
// between its joins, which a join that takes the cold path (admitted at once, a user's or an
// idempotency key's live ticket) may change, and its copies must follow. The joins mix all
// kinds; the first three are admitted at once (max_active 3).
func TestJoinBatchAsOneByOne(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		joins := []queue.JoinParams{
			{}, {UserKey: "u1"}, {ClientKey: "c1", JoinLimit: 2, JoinWindow: time.Hour}, {},
			{UserKey: "u1"}, {ClientKey: "c1", JoinLimit: 2, JoinWindow: time.Hour},
			{ClientKey: "c1", JoinLimit: 2, JoinWindow: time.Hour}, {IdempotencyKey: "k1"},
			{IdempotencyKey: "k1"}, {UserKey: "u2"}, {}, {UserKey: "u2"},
			{ClientKey: "c2", JoinLimit: 1, JoinWindow: time.Hour, IdempotencyKey: "k2"}, {},
			{ClientKey: "c2", JoinLimit: 1, JoinWindow: time.Hour}, {UserKey: "u3", IdempotencyKey: "k3"}, {},
			{ClientKey: "c4", JoinLimit: 1, JoinWindow: time.Hour}, {ClientKey: "c2", JoinLimit: 1, JoinWindow: time.Hour},
			{ClientKey: "c4", JoinLimit: 1, JoinWindow: time.Hour}, {ClientKey: "c5", JoinLimit: 1, JoinWindow: time.Hour},
			{ClientKey: "c2", JoinLimit: 1, JoinWindow: time.Hour, IdempotencyKey: "k2"}, // k2's retry, c2's bucket empty
		}
		ctx := context.Background()
		type answer struct {
			number, position, waiting, serving int64
			status                             queue.Status
			created, limited                   bool
		}
		var buckets []map[string]string // each run's limit buckets afterwards
		at := time.Now()
		run := func(batched bool) []answer {
			s := batchStoreAt(t, c, at) // one clock: the TATs are counted from it
			defer func() {
				b := map[string]string{}
				for _, k := range []string{s.joinKeys("b")[8], s.joinKeys("b")[11]} {
					m, err := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
					require.NoError(t, err)
					if len(m) > 0 { // a bucket expires two windows after its first write
						ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
						require.NoError(t, err)
						require.Positive(t, ttl, "the limit's bucket %s has no expiry (batched %v)", k, batched)
					}
					for f, v := range m {
						b[f] = v
					}
				}
				buckets = append(buckets, b)
			}()
			_, err := s.PutEvent(ctx, storetest.LineConfig("b", 3), 2)
			require.NoError(t, err)
			got := make([]answer, len(joins))
			for i, r := range joinAll(t, s, batched, joins, nil) {
				var rl *queue.RateLimitedError
				if errors.As(r.err, &rl) {
					got[i].limited = true
					continue
				}
				require.NoError(t, r.err, "join %d", i)
				got[i] = answer{r.t.Number, r.t.Position, r.t.Waiting, r.t.Serving, r.t.Status, r.t.Created, false}
			}
			return got
		}
		one, batch := run(false), run(true)
		for i := range joins {
			require.Equal(t, one[i], batch[i], "join %d (%+v)", i, joins[i])
		}
		// The clients' TATs are in the buckets as one by one: a batch keeps a run of one
		// client's and writes it once.
		require.Equal(t, buckets[0], buckets[1], "the limit's buckets after the joins")
		require.Len(t, buckets[0], 3, "c2's, c4's and c5's TATs (c2's limit's new window dropped c1's)")
		require.Equal(t, queue.StatusAdmitted, one[2].status, "the third is admitted at once")
		require.True(t, one[6].limited, "c1's third join is refused")
		require.False(t, one[8].created, "k1's retry finds its ticket")
		require.True(t, one[18].limited, "c2's third join is refused")
		require.False(t, one[21].limited, "k2's retry is not: it takes no new ticket")
		require.Equal(t, one[12].number, one[21].number, "k2's retry finds its ticket")
	})
}

// TestJoinSourceInlinesHotIO: join.lua sent on its own carries its hot path's calls as plain
// redis.calls (no functions made per call); the batched join defines its own versions once.
func TestJoinSourceInlinesHotIO(t *testing.T) {
	single, batched := ScriptSource("join"), JoinBatchSource()
	for _, name := range []string{"ev_read", "ev_write", "left_count", "rl_get", "rl_set", "rl_drop", "rl_window", hotIOMark, hotIOEndMark} {
		require.NotContains(t, single, name, "join.lua on its own")
	}
	require.Contains(t, single, "v = redis.call('HMGET', KEYS[1], 'gen', 'srv'")
	require.Contains(t, single, "nleft = redis.call('ZCARD', KEYS[2])")
	require.Contains(t, single, "local lim, win, ws, tag = (function(now, l, w)", "rl_window made inline")
	require.Contains(t, batched, "local rl_window_of, rlwin = function(now, l, w)")
	require.Equal(t, 1, strings.Count(batched, "local function ev_read("), "the batch defines its reads once")
	require.NotContains(t, batched, hotIOMark)
}

// TestJoinBatchLimitAcrossWindows: a batch whose joins come at times across the limit's window
// edges (each join carries its own time), of two clients in turn, answers each as the same
// joins one by one do: the batch's copy of the last TAT and its window made once per time and
// limit give what the buckets would.
func TestJoinBatchLimitAcrossWindows(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		type join struct {
			at     time.Duration // after the start of a window
			client string
		}
		joins := []join{
			{900 * time.Millisecond, "c1"}, {900 * time.Millisecond, "c1"}, {900 * time.Millisecond, "c2"},
			{900 * time.Millisecond, "c1"}, {900 * time.Millisecond, "c1"}, {1100 * time.Millisecond, "c1"},
			{1100 * time.Millisecond, "c2"}, {1100 * time.Millisecond, "c1"}, {1700 * time.Millisecond, "c1"},
			{2950 * time.Millisecond, "c1"}, {2950 * time.Millisecond, "c1"}, {4100 * time.Millisecond, "c1"},
			{4100 * time.Millisecond, "c1"}, {4100 * time.Millisecond, "c2"}, {4100 * time.Millisecond, "c1"},
			{4100 * time.Millisecond, "c1"},
		}
		ctx := context.Background()
		run := func(batched bool) []string {
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			prefix := "wrtest-batch-" + hex.EncodeToString(b) + ":"
			t.Cleanup(func() { _ = DeletePrefix(context.Background(), c, prefix) })
			start := time.Now().Truncate(time.Second).Add(time.Hour)
			var mu sync.Mutex
			at := start
			s, err := New(Config{Client: c, Prefix: prefix, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return at }})
			require.NoError(t, err)
			_, err = s.PutEvent(ctx, storetest.LineConfig("b", 1), 1)
			require.NoError(t, err)
			ps := make([]queue.JoinParams, len(joins))
			for i, j := range joins {
				ps[i] = queue.JoinParams{ClientKey: j.client, JoinLimit: 3, JoinWindow: time.Second}
			}
			got := make([]string, len(joins))
			for i, r := range joinAll(t, s, batched, ps, func(i int) { mu.Lock(); at = start.Add(joins[i].at); mu.Unlock() }) {
				var rl *queue.RateLimitedError
				switch {
				case errors.As(r.err, &rl):
					got[i] = fmt.Sprintf("limited %s", rl.RetryAfter)
				case r.err != nil:
					got[i] = "error " + r.err.Error()
				default:
					got[i] = fmt.Sprintf("number %d", r.t.Number)
				}
			}
			// After the batch, what it left in the buckets (and the window it named) holds.
			mu.Lock()
			at = start.Add(4200 * time.Millisecond)
			mu.Unlock()
			_, err = s.Join(ctx, queue.JoinParams{Event: "b", ClientKey: "c1", JoinLimit: 3, JoinWindow: time.Second})
			return append(got, fmt.Sprint(errors.Is(err, queue.ErrRateLimited)))
		}
		one, batch := run(false), run(true)
		require.Equal(t, one, batch)
		limited := 0
		for _, a := range one {
			if strings.HasPrefix(a, "limited") {
				limited++
			}
		}
		// c1's 4th at 0.9 s, its 2nd and 3rd at 1.1 s, its 5th at 4.1 s; and at 4.2 s.
		require.Equal(t, 4, limited, "%v", one)
		require.Equal(t, "true", one[len(one)-1], "c1 at 4.2 s")
	})
}

// TestJoinBatchFailsPartWay: a batch keeps the line's last number (seq) and writes it back at
// its end, but a join that names its number in the store (a named user's entries) has it
// written first: a batch that fails after such a join (here a later join's read of an
// idempotency bucket that is not a hash: WRONGTYPE) leaves no entry naming a number that a
// later join is given again.
func TestJoinBatchFailsPartWay(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		s := batchStore(t, c)
		ctx := context.Background()
		first, err := s.Join(ctx, queue.JoinParams{Event: "b", IdempotencyKey: "k0"}) // admitted: the slot
		require.NoError(t, err)
		require.Equal(t, int64(1), first.Number)
		keys := s.joinKeys("b")
		var bucket string
		for _, k := range keys[9:11] {
			if n, _ := c.Do(ctx, c.B().Exists().Key(k).Build()).AsInt64(); n == 1 {
				bucket = k
			}
		}
		require.NotEmpty(t, bucket, "k0's idempotency bucket")
		require.NoError(t, c.Do(ctx, c.B().Del().Key(bucket).Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Set().Key(bucket).Value("x").Build()).Error())

		b := hold(s)
		joins := []queue.JoinParams{{}, {UserKey: "u1"}, {}, {IdempotencyKey: "k1"}}
		out := make([]chan joinResult, len(joins))
		for i, p := range joins {
			p.Event = "b"
			out[i] = make(chan joinResult, 1)
			go func() {
				tk, err := s.Join(ctx, p)
				out[i] <- joinResult{tk, err}
			}()
			queued(t, b, i+1)
		}
		s.handOff(b, "b")
		for i := range joins {
			require.ErrorContains(t, (<-out[i]).err, "WRONGTYPE", "join %d", i)
		}
		requireIdle(t, b)
		require.NoError(t, c.Do(ctx, c.B().Del().Key(bucket).Build()).Error())

		u1, err := s.Join(ctx, queue.JoinParams{Event: "b", UserKey: "u1"})
		require.NoError(t, err)
		require.False(t, u1.Created, "u1's ticket of the failed batch is live")
		for range 4 {
			tk, err := s.Join(ctx, queue.JoinParams{Event: "b"})
			require.NoError(t, err)
			require.NotEqual(t, u1.Number, tk.Number, "u1's number handed out again")
			require.Greater(t, tk.Number, u1.Number)
		}
	})
}

// TestJoinBatchHeadStandsForReplies: a batch answers the new tickets of its joins' hot path
// with their numbers alone and the batch's head (joinBatchSource), and each join still gets
// the whole ticket one by one gives: those that share the head, one at another time (its own
// reply), a named user's, one after a join that took the cold path (a user's live ticket given
// back), an idempotency key's and its retry.
func TestJoinBatchHeadStandsForReplies(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		type join struct {
			at time.Duration
			p  queue.JoinParams
		}
		joins := []join{
			{0, queue.JoinParams{}}, {0, queue.JoinParams{}}, {0, queue.JoinParams{UserKey: "u1"}},
			{5 * time.Millisecond, queue.JoinParams{}}, {0, queue.JoinParams{}},
			{0, queue.JoinParams{UserKey: "u1"}}, {0, queue.JoinParams{}},
			{0, queue.JoinParams{IdempotencyKey: "k1"}}, {0, queue.JoinParams{IdempotencyKey: "k1"}},
			{0, queue.JoinParams{ClientKey: "c1", JoinLimit: 100, JoinWindow: time.Second}}, {0, queue.JoinParams{}},
		}
		ctx := context.Background()
		start := time.Now().Truncate(time.Second).Add(time.Hour)
		run := func(batched bool) []queue.Ticket {
			var mu sync.Mutex
			at := start
			s := rated(t, batchStoreAt(t, c, start))
			s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
			first, err := s.Join(ctx, queue.JoinParams{Event: "b"}) // takes the one slot: the rest wait
			require.NoError(t, err)
			require.Equal(t, queue.StatusAdmitted, first.Status)
			ps := make([]queue.JoinParams, len(joins))
			for i, j := range joins {
				ps[i] = j.p
			}
			got := make([]queue.Ticket, len(joins))
			for i, r := range joinAll(t, s, batched, ps, func(i int) { mu.Lock(); at = start.Add(joins[i].at); mu.Unlock() }) {
				require.NoError(t, r.err, "join %d (batched %v)", i, batched)
				got[i] = r.t
			}
			return got
		}
		one, batch := run(false), run(true)
		for i := range joins {
			require.Equal(t, one[i], batch[i], "join %d (%+v)", i, joins[i])
		}
		require.Equal(t, int64(2), one[0].Number)
		require.Equal(t, int64(1), one[0].Position, "first in line")
		require.False(t, one[5].Created, "u1's ticket given back")
		require.Equal(t, one[2].Number, one[5].Number)
		require.False(t, one[8].Created, "k1's retry finds its ticket")
		require.Equal(t, start.Add(5*time.Millisecond).UnixMilli(), one[3].Now.UnixMilli())

		// The reply itself: the head, then numbers alone for the joins that share it, and the
		// whole reply for the first in line (its cold path looks for a free slot) and for the
		// one at another time.
		s := rated(t, batchStoreAt(t, c, start))
		_, err := s.Join(ctx, queue.JoinParams{Event: "b"})
		require.NoError(t, err)
		ms := strconv.FormatInt(start.UnixMilli(), 10)
		later := strconv.FormatInt(start.UnixMilli()+5, 10)
		v, err := joinBatchScript.Exec(ctx, c, s.joinKeys("b"), []string{"2", ms, "", "2", ms, "", "2", later, "", "2", ms, ""}).ToArray()
		require.NoError(t, err)
		require.Len(t, v, 5)
		head, err := readHead(v[0])
		require.NoError(t, err)
		require.Equal(t, &batchHead{srv: 1, now: start.UnixMilli(), k: 2, rate: 2.5, gen: 1}, head)
		for i, want := range []int64{0, 3, 0, 5} {
			if want == 0 {
				require.False(t, v[i+1].IsInt64(), "join %d: its own reply", i)
				continue
			}
			n, err := v[i+1].AsInt64()
			require.NoError(t, err, "join %d: its number alone", i)
			require.Equal(t, want, n)
		}
	})
}

// rated gives s's event b an admit_rate and a measured admission rate of 2.5 a second (a
// rate that is not an integer).
func rated(t *testing.T, s *Store) *Store {
	t.Helper()
	cfg := storetest.LineConfig("b", 1)
	cfg.AdmitRate = 2.5
	_, err := s.PutEvent(context.Background(), cfg, 2)
	require.NoError(t, err)
	// A measured rate (rt: nothing is measured before the room turns over, and ETAs read 0).
	set := s.client.B().Hset().Key(s.lineKeys("b")[0]).FieldValue().FieldValue("rt", "2.5").Build()
	require.NoError(t, s.client.Do(context.Background(), set).Error())
	return s
}

// TestJoinBatchChallengesAsOneByOne: a batch of joins with challenges of one bucket answers as
// the same joins one by one: an id used before the batch or earlier in it is refused, one
// given back by a join refused after taking it (its client's cap of pre-queue tickets) may be
// used by a later join, and the bucket holds the same ids with an expiry set by the batch that
// made it. On an open line (the first two admitted at once: the cold path) and in a pre-queue.
func TestJoinBatchChallengesAsOneByOne(t *testing.T) {
	batchClients(t, func(t *testing.T, c rueidis.Client) {
		ctx := context.Background()
		at := time.Now()
		exp := at.Add(time.Minute)
		ch := func(client, id string, limit int64) queue.JoinParams {
			return queue.JoinParams{ClientKey: client, JoinLimit: 1000, JoinWindow: time.Hour, TicketLimit: limit,
				ChallengeID: id, ChallengeExpires: exp}
		}
		// Two batches: the first makes the bucket (its expiry is set by a join of the batch),
		// the second finds it.
		joins := [][]queue.JoinParams{{
			ch("c1", "id-1", 0), ch("c2", "id-2", 0), ch("c3", "id-1", 0), // used in the batch
			ch("c5", "id-3", 1), ch("c5", "id-4", 1), // c5's second is over its cap in a pre-queue
			ch("c6", "id-4", 0), // usable again there
		}, {
			ch("c4", "id-2", 0), // used before the batch
			ch("c7", "id-5", 0), ch("c8", "id-5", 0), ch("c9", "id-6", 0),
		}}
		for _, prequeue := range []bool{false, true} {
			t.Run(fmt.Sprintf("prequeue=%v", prequeue), func(t *testing.T) {
				type answer struct {
					number int64
					status queue.Status
					err    string
				}
				var buckets []map[string]string
				run := func(batched bool) []answer {
					cfg := storetest.LineConfig("b", 2)
					if prequeue {
						cfg.OpensAt = at.Add(time.Hour)
					}
					s := batchStoreWith(t, c, at, cfg)
					var got []answer
					for _, js := range joins {
						for _, r := range joinAll(t, s, batched, js, nil) {
							if r.err != nil {
								got = append(got, answer{err: r.err.Error()})
								continue
							}
							got = append(got, answer{r.t.Number, r.t.Status, ""})
						}
					}
					key := s.joinKeys("b")[0]
					key = key[:strings.LastIndexByte(key, '}')+1] + ":ch:" +
						fmt.Sprint(exp.Add(queue.ChallengeGrace).UnixMilli()/challengeBucketMS+1)
					m, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
					require.NoError(t, err)
					ttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
					require.NoError(t, err)
					require.Positive(t, ttl, "the bucket of used challenges has no expiry (batched %v)", batched)
					buckets = append(buckets, m)
					return got
				}
				one, batch := run(false), run(true)
				all := slices.Concat(joins...)
				for i := range all {
					require.Equal(t, one[i], batch[i], "join %d (%+v)", i, all[i])
				}
				require.Equal(t, buckets[0], buckets[1], "the used challenges after the joins")
				require.Len(t, buckets[0], 6, "id-1 … id-6, each once")
				require.Contains(t, one[2].err, "challenge", "id-1 a second time")
				require.Contains(t, one[6].err, "challenge", "id-2 used in the batch before")
				require.Contains(t, one[8].err, "challenge", "id-5 a second time")
				if prequeue {
					require.NotEmpty(t, one[4].err, "c5's second ticket of the pre-queue")
					require.Empty(t, one[5].err, "id-4 given back")
				} else {
					require.Equal(t, queue.StatusAdmitted, one[0].status, "admitted at once")
					require.Contains(t, one[5].err, "challenge", "id-4 a second time")
				}
			})
		}
	})
}

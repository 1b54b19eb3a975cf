package ratelimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestWindow(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w := New(c.now)
	n, left := w.Count("a", 0, 10*time.Second)
	require.Zero(t, n)
	require.Equal(t, 10*time.Second, left)
	w.Count("a", 1, 10*time.Second)
	c.add(4 * time.Second)
	n, left = w.Count("a", 2, 10*time.Second)
	require.Equal(t, int64(3), n)
	require.Equal(t, 6*time.Second, left)
	n, _ = w.Count("a", 0, 10*time.Second)
	require.Equal(t, int64(3), n, "0 only reads")
	n, _ = w.Count("b", 1, 10*time.Second)
	require.Equal(t, int64(1), n, "keys are counted apart")
	c.add(6 * time.Second)
	n, _ = w.Count("a", 0, 10*time.Second)
	require.Zero(t, n, "a new window")
	n, _ = w.Count("a", 1, 0)
	require.Zero(t, n, "no window")
}

func TestWindowIsExactUnderConcurrencyAndSweeps(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w := New(c.now)
	var within atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if n, _ := w.Count("k", 1, time.Minute); n <= 50 {
					within.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(50), within.Load(), "each count is seen once")
	for i := 0; i < 200_000; i++ {
		w.Count(fmt.Sprint(i), 1, time.Second)
		if i%50_000 == 0 {
			c.add(3 * time.Second)
		}
	}
	total := 0
	for i := range w.shards {
		total += len(w.shards[i].m)
	}
	require.Less(t, total, 200_000, "old windows' entries are swept")
}

func TestRefusals(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := NewRefusals(c.now)
	_, refused := r.Refused("a")
	require.False(t, refused)
	r.Refuse("a", 3*time.Second)
	r.Refuse("a", time.Second) // a shorter refusal does not cut a longer one
	r.Refuse("b", 0)
	left, refused := r.Refused("a")
	require.True(t, refused)
	require.Equal(t, 3*time.Second, left)
	_, refused = r.Refused("b")
	require.False(t, refused, "a refusal of no time is none")
	c.add(3 * time.Second)
	_, refused = r.Refused("a")
	require.False(t, refused, "over at its end")
	// The sweep keeps the map to the live refusals: a second round of keys, once the first
	// ran out, fills the shards past their sweep point and the first round goes.
	const keys = 70_000 // over 1,024 per shard
	for i := range keys {
		r.Refuse(fmt.Sprint("k", i), time.Millisecond)
	}
	c.add(time.Second)
	for i := range keys {
		r.Refuse(fmt.Sprint("m", i), time.Second)
	}
	n := 0
	for i := range r.shards {
		n += len(r.shards[i].until)
	}
	require.Less(t, n, 2*keys)
	require.GreaterOrEqual(t, n, keys)
}

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
	for i := 0; i < 3; i++ {
		ok, _ := w.Allow("a", 3, 10*time.Second)
		require.True(t, ok)
	}
	c.add(4 * time.Second)
	ok, retry := w.Allow("a", 3, 10*time.Second)
	require.False(t, ok)
	require.Equal(t, 6*time.Second, retry)
	ex, _ := w.Exceeded("a", 3, 10*time.Second)
	require.True(t, ex)
	ok, _ = w.Allow("b", 3, 10*time.Second)
	require.True(t, ok, "keys are counted apart")
	c.add(6 * time.Second)
	ok, _ = w.Allow("a", 3, 10*time.Second)
	require.True(t, ok, "a new window")
	ok, _ = w.Allow("a", 0, 0)
	require.True(t, ok, "no limit")
}

func TestWindowIsExactUnderConcurrencyAndSweeps(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w := New(c.now)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if ok, _ := w.Allow("k", 50, time.Minute); ok {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(50), allowed.Load())
	for i := 0; i < 200_000; i++ {
		w.Allow(fmt.Sprint(i), 5, time.Second)
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

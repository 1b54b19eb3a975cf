package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/eventually"
)

// TestRaiserCoversEveryCaller: callers that come while a reservation runs wait for it when it
// covers what they ask for, and for the next one, which takes the largest of their figures,
// when it does not: nobody returns with a ceiling short of its own (as a single flight did,
// where a join admitted at once waited for an admission step's smaller raise).
func TestRaiserCoversEveryCaller(t *testing.T) {
	var r raiser
	type call struct{ seq, serving int64 }
	var mu sync.Mutex
	var calls []call
	gate := make(chan struct{})
	started := make(chan struct{}, 4)
	fn := func(ctx context.Context, seq, serving int64) error {
		mu.Lock()
		calls = append(calls, call{seq, serving})
		mu.Unlock()
		started <- struct{}{}
		<-gate
		return nil
	}
	ran := func() []call {
		mu.Lock()
		defer mu.Unlock()
		return append([]call(nil), calls...)
	}
	ctx := t.Context()
	type result struct {
		name string
		err  error
		runs []call // the runs begun when the caller returned
	}
	results := make(chan result, 3)
	do := func(name string, seq, serving int64) {
		go func() {
			err := r.do(ctx, "ev", seq, serving, fn)
			results <- result{name, err, ran()}
		}()
	}
	asked := func(seq, serving int64) func() bool {
		return func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			l := r.lines["ev"]
			return l != nil && l.seq >= seq && l.serving >= serving
		}
	}

	do("a", 100, 10) // runs first
	<-started
	do("b", 100, 50) // asks for more serving than the run covers
	do("c", 80, 5)   // covered by the run going on
	eventually.True(t, 5*time.Second, "b and c asked", asked(100, 50))
	gate <- struct{}{}
	got := map[string]result{}
	for range 2 {
		res := <-results
		got[res.name] = res
	}
	require.Contains(t, got, "a")
	require.Contains(t, got, "c", "b returned after a run that did not cover it")
	select {
	case <-started: // the next run, for b
	case <-time.After(5 * time.Second):
		require.Fail(t, "no run for b")
	}
	require.Equal(t, []call{{100, 10}, {100, 50}}, ran(), "the second run takes b's figures")
	gate <- struct{}{}
	res := <-results
	got[res.name] = res
	for _, name := range []string{"a", "b", "c"} {
		require.NoError(t, got[name].err, name)
	}
	require.Len(t, got["b"].runs, 2, "b returned only after a run that covers it")

	// A failed run's error reaches the callers it covered; a caller whose context ends first
	// gets that.
	fail := errors.New("sql down")
	err := r.do(ctx, "ev2", 1, 1, func(context.Context, int64, int64) error { return fail })
	require.ErrorIs(t, err, fail)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	block := make(chan struct{})
	defer close(block)
	err = r.do(cctx, "ev3", 1, 1, func(context.Context, int64, int64) error { <-block; return nil })
	require.ErrorIs(t, err, context.Canceled)
}

package loop

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoopRunsUntilStopped(t *testing.T) {
	var l Loop
	l.Stop() // before Start: no-op
	var n atomic.Int64
	ran := make(chan struct{}, 100)
	l.Start(context.Background(), "test step", time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), func(context.Context) error {
		n.Add(1)
		ran <- struct{}{}
		return errors.New("logged, not fatal")
	})
	waitSteps(t, ran, 3, "the step did not run")
	l.Stop()
	after := n.Load()
	l.Stop() // twice: no-op
	select {
	case <-ran:
	default:
	}
	if n.Load() > after+1 {
		t.Fatalf("the step ran after Stop: %d > %d", n.Load(), after)
	}
}

func TestLoopEndsWithContext(t *testing.T) {
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	l.Start(ctx, "test", time.Hour, slog.Default(), func(context.Context) error { return nil })
	cancel()
	l.Stop() // returns once the goroutine saw ctx end; goleak checks nothing is left
}

// TestPanicsAreRecovered: a step that panics is logged, counted, and the loop goes on.
func TestPanicsAreRecovered(t *testing.T) {
	var l Loop
	var n atomic.Int64
	ran := make(chan struct{}, 100)
	before := Panics()["panicky step"]
	l.Start(context.Background(), "panicky step", time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), func(context.Context) error {
		ran <- struct{}{}
		if n.Add(1) == 1 {
			var r []int
			_ = r[3] // index out of range: a short reply read without checks
		}
		return nil
	})
	waitSteps(t, ran, 3, "the loop stopped after a panic")
	l.Stop()
	if got := Panics()["panicky step"] - before; got != 1 {
		t.Fatalf("panics counted: %d, want 1", got)
	}
}

// TestStepHasDeadline: a step blocked on its context (a store that never answers) is ended by
// StepTimeout, and the loop goes on with the next step.
func TestStepHasDeadline(t *testing.T) {
	l := Loop{StepTimeout: 20 * time.Millisecond}
	ends := make(chan error, 10)
	l.Start(context.Background(), "hung step", time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			ends <- errors.New("no deadline")
			return nil
		}
		<-ctx.Done()
		ends <- ctx.Err()
		return ctx.Err()
	})
	defer l.Stop()
	for i := 0; i < 2; i++ {
		select {
		case err := <-ends:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("step %d ended with %v, want its deadline", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a hung step was not ended by its deadline")
		}
	}
}

// TestNext: an aligned loop's instants are the multiples of its interval since the epoch plus
// its offset, whenever it asks.
func TestNext(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(1_764_800_000_000 + ms) } // a whole second
	for _, c := range []struct {
		now           int64
		interval, off time.Duration
		want          time.Duration
	}{
		{0, time.Second, 0, time.Second}, // on an instant: the next one
		{1, time.Second, 0, 999 * time.Millisecond},
		{0, time.Second, 125 * time.Millisecond, 125 * time.Millisecond},
		{130, time.Second, 125 * time.Millisecond, 995 * time.Millisecond},
		{260, 250 * time.Millisecond, 0, 240 * time.Millisecond},
		{-10, 250 * time.Millisecond, 0, 10 * time.Millisecond},
	} {
		if got := Next(at(c.now), c.interval, c.off); got != c.want {
			t.Errorf("Next(+%d ms, %v, %v) = %v, want %v", c.now, c.interval, c.off, got, c.want)
		}
	}
}

// TestAlignedLoopRuns: an aligned loop steps and stops like any other.
func TestAlignedLoopRuns(t *testing.T) {
	l := Loop{Align: true, Offset: time.Millisecond}
	ran := make(chan struct{}, 100)
	l.Start(context.Background(), "aligned", 5*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), func(context.Context) error {
		ran <- struct{}{}
		return nil
	})
	waitSteps(t, ran, 3, "the aligned step did not run")
	l.Stop()
}

// waitSteps waits for n steps to report on ran, failing with msg after 5 s without one.
func waitSteps(t *testing.T, ran <-chan struct{}, n int, msg string) {
	t.Helper()
	for range n {
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal(msg)
		}
	}
}

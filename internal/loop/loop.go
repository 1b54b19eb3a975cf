// Package loop is the lifecycle every background component of an instance shares: run a step
// every interval until stopped, log its failures, survive its panics, and stop cleanly (before
// a start, twice, or concurrently).
package loop

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"time"
)

// panics counts the panics recovered by Guard, by name, for the whole process (like expvar:
// the metrics package exports it as waitroom_loop_panics_total).
var panics struct {
	sync.Mutex
	n map[string]int64
}

// Panics returns how many panics Guard recovered, by loop name, since the process started.
func Panics() map[string]int64 {
	panics.Lock()
	defer panics.Unlock()
	return maps.Clone(panics.n)
}

// Guard runs f; a panic inside it is recovered, logged at error level with its stack, counted
// under name (Panics), and returned as an error, so that the loop calling Guard goes on with
// its next round instead of taking the process down.
func Guard(name string, log *slog.Logger, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			panics.Lock()
			if panics.n == nil {
				panics.n = map[string]int64{}
			}
			panics.n[name]++
			panics.Unlock()
			log.Error(name+" panicked; going on", "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("%s panicked: %v", name, v)
		}
	}()
	return f()
}

// DefaultStepTimeout bounds one step of a Loop whose StepTimeout is zero.
const DefaultStepTimeout = 10 * time.Second

// Loop runs one step function periodically. The zero Loop is stopped; Stop on it is a no-op.
type Loop struct {
	// StepTimeout is the deadline of each step's context, so that a store or database that
	// accepts and never answers cannot hold the loop for good (set before Start). Defaults to
	// DefaultStepTimeout.
	StepTimeout time.Duration
	// Align, when set (before Start), runs the steps at the instants of the wall clock that
	// are whole multiples of the interval since the Unix epoch plus Offset, the wait for each
	// taken afresh from the clock (Next), instead of every interval from Start. Loops that
	// read what other loops write then keep a fixed phase to them, in one process and across
	// instances whose clocks agree to well within the offset: autoadmit's controller reads
	// the signals midway between two of their flushes (started together, the two tickers
	// raced at every read, and a 1-s window held 0.75 or 1.25 s of requests in turn). It is
	// timing only: nothing is ordered by it.
	Align  bool
	Offset time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start calls step every interval until Stop or ctx ends. A failed step is logged as
// "<name> failed" with its error, unless the loop is stopping; a step that panics is recovered
// (Guard) and the next one runs at the next interval. Each step's context ends after
// StepTimeout. Start on a running loop is a no-op.
func (l *Loop) Start(ctx context.Context, name string, interval time.Duration, log *slog.Logger, step func(context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	timeout := l.StepTimeout
	if timeout <= 0 {
		timeout = DefaultStepTimeout
	}
	align, offset := l.Align, l.Offset
	go func() {
		defer close(l.done)
		var tick <-chan time.Time
		var timer *time.Timer
		if align {
			timer = time.NewTimer(Next(time.Now(), interval, offset))
			defer timer.Stop()
			tick = timer.C
		} else {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick:
				if err := Guard(name, log, func() error {
					sctx, cancel := context.WithTimeout(ctx, timeout)
					defer cancel()
					return step(sctx)
				}); err != nil && ctx.Err() == nil {
					log.Warn(name+" failed", "err", err)
				}
				if align {
					timer.Reset(Next(time.Now(), interval, offset))
				}
			}
		}
	}()
}

// Next returns how long after now the next instant of a Loop with Align comes: the next
// multiple of interval since the Unix epoch, plus offset, strictly after now (so (0, interval]).
func Next(now time.Time, interval, offset time.Duration) time.Duration {
	r := (now.UnixNano() - int64(offset)) % int64(interval)
	if r < 0 {
		r += int64(interval)
	}
	return time.Duration(int64(interval) - r)
}

// Stop ends the loop and waits for the running step to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

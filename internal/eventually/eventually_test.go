package eventually_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/eventually"
)

// fakeT records a Fatalf and stops the helper the way testing.T does (by not returning).
type fakeT struct {
	testing.TB
	msg string
}

type fatal struct{}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatal{})
}

// run calls fn with a fakeT and returns the Fatalf message, or "" when fn returned normally.
func run(fn func(t testing.TB)) (msg string) {
	f := &fakeT{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

func TestTrueAtOnce(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(func(t testing.TB) {
		eventually.True(t, time.Minute, "x", func() bool { calls++; return true })
	})
	if msg != "" || calls != 1 {
		t.Fatalf("msg %q calls %d, want no failure after one call", msg, calls)
	}
	if d := time.Since(start); d >= eventually.Interval {
		t.Errorf("took %s: no pause before the first check", d)
	}
}

func TestTrueAfterSomeChecks(t *testing.T) {
	calls := 0
	msg := run(func(t testing.TB) {
		eventually.True(t, time.Minute, "x", func() bool { calls++; return calls == 3 })
	})
	if msg != "" || calls != 3 {
		t.Fatalf("msg %q calls %d, want no failure after three calls", msg, calls)
	}
}

func TestTrueTimesOut(t *testing.T) {
	const timeout = 50 * time.Millisecond
	calls := 0
	start := time.Now()
	msg := run(func(t testing.TB) {
		eventually.True(t, timeout, "the thing to happen", func() bool { calls++; return false })
	})
	if want := "timed out after 50ms waiting for the thing to happen"; msg != want {
		t.Fatalf("msg %q, want %q", msg, want)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("failed after %s, before the %s timeout", d, timeout)
	}
	if calls < 2 {
		t.Errorf("%d checks, want several", calls)
	}
}

func TestNoErrorReportsTheLastError(t *testing.T) {
	calls := 0
	msg := run(func(t testing.TB) {
		eventually.NoError(t, 30*time.Millisecond, "no entry pending", func() error {
			calls++
			return fmt.Errorf("%d pending", 100-calls)
		})
	})
	want := fmt.Sprintf("timed out after 30ms waiting for no entry pending: %d pending", 100-calls)
	if msg != want {
		t.Fatalf("msg %q, want %q", msg, want)
	}
}

func TestNoErrorSucceeds(t *testing.T) {
	errNotYet := errors.New("not yet")
	calls := 0
	msg := run(func(t testing.TB) {
		eventually.NoError(t, time.Minute, "x", func() error {
			if calls++; calls < 2 {
				return errNotYet
			}
			return nil
		})
	})
	if msg != "" || calls != 2 {
		t.Fatalf("msg %q calls %d", msg, calls)
	}
}

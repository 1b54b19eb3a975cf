// Package eventually lets a test wait for something that happens in the background (a loop
// admitting, a message crossing Redis, a connection closing) without sleeping for a guessed
// time: it polls a condition every [Interval] until it holds, and fails the test, naming what
// it waited for, once the deadline has passed.
package eventually

import (
	"errors"
	"testing"
	"time"
)

// Interval is the pause between two checks of a condition.
const Interval = 10 * time.Millisecond

var errFalse = errors.New("condition false")

// True polls cond every [Interval] until it returns true; when it is still false timeout after
// the first check, it fails the test with t.Fatalf("timed out after <timeout> waiting for
// <what>"). cond runs on the test's goroutine, so it may itself use t (require, t.Fatal).
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	NoError(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errFalse
	})
}

// NoError polls check every [Interval] until it returns nil; when it still returns an error
// timeout after the first check, it fails the test with that last error, which should say
// what the state is (e.g. "3 entries pending"). check runs on the test's goroutine.
func NoError(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errFalse {
				t.Fatalf("timed out after %s waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(Interval) // polling a condition with a deadline, not synchronising on time
	}
}

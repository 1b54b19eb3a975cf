package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTopUpsRunTheLatestAfterTheRunningOne: while one reservation of an event runs, those
// asked for meanwhile are not dropped: the latest runs after it, once; another event's runs at
// once beside it.
func TestTopUpsRunTheLatestAfterTheRunningOne(t *testing.T) {
	var tu TopUps
	type call struct {
		event      string
		seq, ahead int64
	}
	calls := make(chan call, 10)
	release := make(chan struct{})
	raise := func(event string) func(context.Context, int64, int64) error {
		return func(ctx context.Context, seq, ahead int64) error {
			_, bounded := ctx.Deadline()
			require.True(t, bounded)
			calls <- call{event, seq, ahead}
			if event == "a" && seq == 1 {
				<-release // the first run of a is slow
			}
			return nil
		}
	}
	tu.Go("a", 1, 10, time.Minute, raise("a"), nil)
	require.Equal(t, call{"a", 1, 10}, <-calls)
	tu.Go("a", 2, 20, time.Minute, raise("a"), nil)
	tu.Go("a", 3, 30, time.Minute, raise("a"), nil) // the latest replaces the one before
	tu.Go("b", 7, 70, time.Minute, raise("b"), nil)
	require.Equal(t, call{"b", 7, 70}, <-calls, "another event's runs beside a's")
	close(release)
	require.Equal(t, call{"a", 3, 30}, <-calls, "the latest asked for runs after the running one")
	require.Eventually(t, func() bool {
		tu.mu.Lock()
		defer tu.mu.Unlock()
		return len(tu.next) == 0
	}, 10*time.Second, time.Millisecond, "both runs end")
	select {
	case c := <-calls:
		t.Fatalf("a run too many: %+v", c)
	default:
	}
	tu.Go("a", 4, 40, time.Minute, raise("a"), nil)
	require.Equal(t, call{"a", 4, 40}, <-calls, "an idle event's runs at once")
}

package event_test

import (
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
)

func TestPollAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	q := func(pos int64) queue.Ticket { return queue.Ticket{Status: queue.StatusQueued, Position: pos, Now: now} }
	for _, c := range []struct {
		name  string
		t     queue.Ticket
		eta   int64
		claim time.Duration
		want  int64
	}{
		{"head of the line", q(1), 1, time.Minute, 1},
		{"far back, slow line", q(100_000), 10_000, time.Minute, 20},
		{"far back, capped at 30 s", q(100_000), 10_000, 5 * time.Minute, 30},
		{"half the ETA when that is sooner", q(6000), 10, time.Minute, 5},
		{"unknown ETA", q(1000), -1, time.Minute, 5},
		{"a short claim TTL shortens polls", q(100_000), 10_000, 6 * time.Second, 2},
		{"admitted: a third of the time left", queue.Ticket{Status: queue.StatusAdmitted, Now: now, AdmittedUntil: now.Add(30 * time.Second)}, -1, time.Minute, 10},
		{"terminal", queue.Ticket{Status: queue.StatusExpired}, -1, time.Minute, 0},
	} {
		if got := (event.Event{ClaimTTL: c.claim}).PollAfter(c.t, c.eta); got != c.want {
			t.Errorf("%s: pollAfter = %d, want %d", c.name, got, c.want)
		}
	}
}

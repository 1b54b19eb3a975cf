package httpapi

import (
	"time"

	"github.com/waitroom/waitroom/internal/queue"
)

// PollAfter is the service's rule for how long a client should wait before asking again
// about a ticket (s, 1..30), for callers outside this package (the gate's Retry-After). eta
// is the ticket's ETA in seconds (-1 unknown); claimTTL the event's claim TTL.
func PollAfter(t queue.Ticket, eta int64, claimTTL time.Duration) int64 {
	return pollAfter(t, eta, claimTTL)
}

// Package history holds the recent past of every event and coupon campaign that the operator
// console charts: the samples of their figures, the counters the instances add up, the
// instances alive, and the rules read from them — rates that do not fall to zero between
// admissions, the time to clear a line, a sell-out forecast, and the join time of a ticket
// number (for waitroom_time_in_queue_seconds). The Store interface is implemented by every
// backend (memstore, redisstore) and proved by one conformance suite (storetest.RunHistory);
// package recorder takes the samples and serves them.
//
// Why in the store and not in each instance: behind a load balancer, consecutive requests of one
// console reach different instances. Figures kept per instance would differ by instance (an
// instance restarted a minute ago would know a minute) and the per-instance counts (429s, 503s)
// would be a third of the truth with three instances. So:
//
//   - the shared figures (waiting, active, serving, admitted and joined totals, sold, held,
//     coupons issued) are read from the line, sale and coupon stores by ONE instance at a time,
//     the holder of the "history" lease, and appended to the event's series in this store, at
//     the store's clock: every instance reads the same series;
//   - what each instance counts alone (answers 429 and 503 on an event's routes) it adds to the
//     event's counters in this store every interval, so the counters are the fleet's sums; the
//     sampler copies them into each sample;
//   - every instance records a heartbeat here every interval: the instances alive.
package history

import (
	"context"
	"time"
)

// Store keeps the series, counters and heartbeats shared by the instances of one backend. Each
// method is one atomic step. Series and counters are named by the functions below; a backend
// keeps each under a key of its own.
type Store interface {
	// Append adds a sample (data, opaque to the store) to series at time at, drops the series'
	// samples older than at-keep, and makes the whole series expire keep after at if nothing
	// is appended any more (a deleted event's history goes away by itself). Two samples at the
	// same millisecond with different data are both kept.
	Append(ctx context.Context, series string, at time.Time, data string, keep time.Duration) error
	// Range returns the samples of series at or after since, oldest first (none when the
	// series does not exist).
	Range(ctx context.Context, series string, since time.Time) ([]Entry, error)
	// Add adds each delta to its counter of series (a counter starts at 0), and makes the
	// counters expire CountersTTL after this call.
	Add(ctx context.Context, series string, deltas map[string]int64) error
	// Counters returns the counters of series (absent: none).
	Counters(ctx context.Context, series string) (map[string]int64, error)
	// Beat records that instance id is alive until ttl from the store's clock, with info
	// (opaque), forgets the instances whose time ran out, and returns those alive, by id.
	Beat(ctx context.Context, id, info string, ttl time.Duration) ([]Instance, error)
}

// Entry is one sample of a series.
type Entry struct {
	At   time.Time // as given to Append (whole milliseconds, UTC)
	Data string
}

// Instance is an instance alive: its id, the info it gave, and until when it counts as alive
// (the store's clock).
type Instance struct {
	ID    string
	Info  string
	Until time.Time
}

// CountersTTL is how long a series' counters live after their last Add. The samples copy the
// counters' running totals and read rates from their differences, so a counter that expired
// and starts again at 0 reads as a reset, not as a negative rate.
const CountersTTL = 24 * time.Hour

// Series names. An event's and a campaign's never collide (their prefixes differ).

// EventSeries is the series of an event's samples (EventSample).
func EventSeries(event string) string { return "e:" + event }

// ClockSeries is the sparse, long series of an event's ticket numbers (Checkpoint): the join
// times of tickets that waited longer than the event series keeps.
func ClockSeries(event string) string { return "e:" + event + ":clock" }

// CampaignSeries is the series of a coupon campaign's samples (CampaignSample).
func CampaignSeries(campaign string) string { return "c:" + campaign }

// Counter names of an event's series.
const (
	CounterRejected    = "429" // answers 429 on the event's routes
	CounterUnavailable = "503" // answers 503 on the event's routes
)

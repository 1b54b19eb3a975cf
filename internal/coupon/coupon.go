// Package coupon holds the domain of first-come-first-served coupon campaigns: campaigns,
// entries and their statuses, the Store interface every backend implements (memstore,
// redisstore) and the sentinel errors. Every entry is accepted at once and numbered in arrival
// order by the store; the issuance workers of package issuance issue coupons asynchronously in
// entry order, each written to the database with a unique (campaign, user) constraint and a
// stock counter that cannot pass the stock.
//
// The queue between entry and issuance is reliable: a worker takes entries under a lease
// (moved to a processing set scored by the lease's expiry, not popped), records their outcome
// only after the database has them, and entries whose lease ran out are taken again by any
// worker. A worker that dies between taking and recording therefore loses nothing, and the
// database's constraints make its retry harmless: nothing is issued twice.
package coupon

import (
	"context"
	"errors"
	"time"
)

// Status is an entry's state as its user sees it.
type Status string

// Entry statuses.
const (
	StatusPending  Status = "PENDING"  // waiting for issuance
	StatusIssued   Status = "ISSUED"   // a coupon was issued (Code)
	StatusRejected Status = "REJECTED" // the stock was gone
)

// Sentinel errors of the stores and the service.
var (
	ErrCampaignNotFound = errors.New("campaign not found")
	ErrEntryNotFound    = errors.New("no entry for this user")
	// ErrNotOpen: the campaign opens later (see NotOpenError).
	ErrNotOpen = errors.New("campaign not open yet")
)

// NotOpenError is an entry made before the campaign opens. It matches ErrNotOpen.
type NotOpenError struct{ OpensAt time.Time }

func (e *NotOpenError) Error() string { return "campaign opens at " + e.OpensAt.Format(time.RFC3339) }

// Is makes errors.Is(err, ErrNotOpen) hold.
func (e *NotOpenError) Is(target error) bool { return target == ErrNotOpen }

// Campaign is what the store enforces of a campaign.
type Campaign struct {
	ID    string
	Stock int64
	// OpensAt: entries before it are refused. Zero = open.
	OpensAt time.Time
}

// Entry is one user's entry.
type Entry struct {
	Campaign string
	UserID   string
	// Number is the entry's place in entry order (1-based).
	Number int64
	Status Status
	// Code is the coupon code once issued (the store may not know it: see Service.Entry).
	Code string
}

// Task is an entry taken by a worker for issuance.
type Task struct {
	Number int64
	UserID string
	// Waited is how long the entry had been queued when it was taken, on the store's clock
	// (from Enter to this Take; a retake after a dead worker's lease counts from Enter too).
	// Negative when the store does not know (an entry made before it kept entry times).
	Waited time.Duration
}

// Outcome is what a worker recorded for a task: Code, or "" for rejected.
type Outcome struct {
	Number int64
	Code   string
}

// Stats are a campaign's counters.
type Stats struct {
	Stock    int64
	Entries  int64
	Issued   int64
	Rejected int64
	// Taken counts entries taken by a worker and not recorded yet.
	Taken int64
	// Now is the store's clock when read.
	Now time.Time
}

// Pending is the number of entries not decided yet.
func (s Stats) Pending() int64 { return s.Entries - s.Issued - s.Rejected }

// Store keeps the campaigns' entries and queues. Every method is one atomic step.
// Implementations: memstore (in-process) and redisstore (Redis and Redis Cluster).
type Store interface {
	// PutCampaign creates or updates a campaign (its entries are kept).
	PutCampaign(ctx context.Context, c Campaign) error
	// DeleteCampaign removes a campaign and its entries.
	DeleteCampaign(ctx context.Context, id string) error
	// Enter numbers the user's entry and queues it, or returns the user's existing entry with
	// created false. Entries beyond the stock are rejected at once.
	// Errors: ErrCampaignNotFound, *NotOpenError.
	Enter(ctx context.Context, campaign, userKey, userID string) (e Entry, created bool, err error)
	// Entry returns the user's entry. Errors: ErrCampaignNotFound, ErrEntryNotFound.
	Entry(ctx context.Context, campaign, userKey string) (Entry, error)
	// Take leases up to n entries to the caller for lease, oldest first: entries whose lease
	// ran out (their worker died) before new ones. Errors: ErrCampaignNotFound.
	Take(ctx context.Context, campaign string, n int, lease time.Duration) ([]Task, error)
	// Record stores the outcomes of taken entries and ends their leases. An entry recorded
	// already keeps its first outcome (a slow worker's late record changes nothing).
	Record(ctx context.Context, campaign string, outcomes []Outcome) error
	// CampaignStats returns the counters. Errors: ErrCampaignNotFound.
	CampaignStats(ctx context.Context, campaign string) (Stats, error)
}

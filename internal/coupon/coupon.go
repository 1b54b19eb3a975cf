// Package coupon holds the domain of first-come-first-served coupon campaigns: campaigns,
// entries and their statuses, the Store interface every backend implements (memstore,
// redisstore), the records the database keeps (CampaignRecord, EntryRecord, Coupon: record.go,
// returned by package sqlstore) and the sentinel errors. Every entry is accepted at once and
// numbered in arrival order by the store; the issuance workers of package issuance issue
// coupons asynchronously in entry order, each written to the database with a unique (campaign,
// user) constraint and a stock counter that cannot pass the stock.
//
// The queue between entry and issuance is reliable: a worker takes entries under a lease
// (moved to a processing set scored by the lease's expiry, not popped), records their outcome
// only after the database has them, and entries whose lease ran out are taken again by any
// worker. A worker that dies between taking and recording therefore loses nothing, and the
// database's constraints make its retry harmless: nothing is issued twice.
//
// The database, not the store, is the truth of entries (docs/durability.md): the store hands
// out numbers only below a ceiling reserved in the database in blocks (RaiseCeiling), an entry
// is answered only once the database holds it (an entry the store made and the database does
// not hold yet is Unconfirmed), and a store that lost data is put back in order from the
// database (RecoverCampaign, RestoreEntries): numbers resume above the ceiling and are never
// handed out twice.
package coupon

import (
	"context"
	"errors"
	"fmt"
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
	// ErrNeedsRecovery: the store's copy of the campaign may have lost writes (Redis came back
	// from an older snapshot, or a replica that missed the last writes was promoted): recover
	// it from the database (RecoverCampaign) before its numbers are used.
	ErrNeedsRecovery = errors.New("the campaign's store copy may have lost writes: recover it first")
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
	// Number is the entry's place in entry order (1-based; numbers may skip, never repeat).
	Number int64
	Status Status
	// Code is the coupon code once issued (the store may not know it: see Service.Entry).
	Code string
	// Unconfirmed: the store made the entry and the database is not known to hold it yet (its
	// write is in flight, or failed); it must be written there before it is answered.
	Unconfirmed bool
}

// Fact is an entry as the database holds it, written to a store by RestoreEntries. UserKey is
// token.UserKey(Entry.UserID).
type Fact struct {
	UserKey string
	Entry   Entry
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
	// UserID is the task's user: the store records the outcome only if the entry is still
	// that user's.
	UserID string
	Code   string
}

// Stats are a campaign's figures as the service shows them: Entries, Issued and Rejected from
// the database, Stock, Taken and Now from the store.
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

// Counters are what a store holds of a campaign.
type Counters struct {
	Stock int64
	// Seq is the highest entry number handed out (or skipped to); Ceiling the highest it may
	// hand out before a RaiseCeiling.
	Seq, Ceiling int64
	// Admitted counts entries queued for issuance (not rejected at once): a new entry is
	// rejected at once when Admitted reaches Stock. After a loss it is restored from the
	// database, never above the true count (an overcount would reject an entry the stock has
	// room for; an undercount only queues entries the worker then rejects).
	Admitted int64
	// Queued counts entries waiting to be taken, Taken those taken and not recorded.
	Queued, Taken int64
	// Incarnation names this copy of the campaign in the store (new each time the store
	// creates it): a Block reserved for another is refused.
	Incarnation string
	// Now is the store's clock when read.
	Now time.Time
}

// EnterResult is a store's answer to an entry.
type EnterResult struct {
	Entry Entry
	// Created: a new entry (false: the user's existing one).
	Created bool
	// Refill, when not 0, is the ceiling of a store with less than half a Block of numbers left
	// below it: time to reserve the next block (ahead of need, so entries rarely wait).
	Refill int64
	// Incarnation is the campaign's (with Refill).
	Incarnation string
}

// CeilingError is an entry refused because the store has handed out every number below its
// ceiling: reserve a block above Seq, RaiseCeiling, and enter again. It matches ErrCeiling.
type CeilingError struct {
	// Seq is the highest number handed out, Ceiling the store's ceiling (Seq is above it only
	// in a campaign from before the ceiling).
	Seq, Ceiling int64
	Incarnation  string
}

// ErrCeiling: see CeilingError.
var ErrCeiling = errors.New("no entry number left below the ceiling")

func (e *CeilingError) Error() string { return fmt.Sprintf("%s (seq %d)", ErrCeiling, e.Seq) }

// Is makes errors.Is(err, ErrCeiling) hold.
func (e *CeilingError) Is(target error) bool { return target == ErrCeiling }

// Block is a block of entry numbers, (Lo, Hi], reserved in the database for the store copy
// named Incarnation.
type Block struct {
	Incarnation string
	Lo, Hi      int64
}

// BlockSize is how many entry numbers one reservation takes (sqlstore.DB.ReserveEntries). A store
// asks for the next block when fewer than half a block are left (EnterResult.Refill), so an
// entry waits for the database about once a block at most, and not at all at a steady pace.
// After a loss, numbering resumes above the database's ceiling: at most 1.5 blocks of numbers
// are skipped (a gap in positions, nobody waits longer for it: issuance goes in number order
// and skips nothing it has to wait for).
const BlockSize = 1024

// Recovery is what the database says of a campaign whose store lost data: Floor is at least
// every number ever handed out (the database's ceiling, read after the loss), Admitted the
// entries it holds that are not rejected.
type Recovery struct {
	Floor, Admitted int64
}

// Store keeps the campaigns' entries and queues. Every method is one atomic step.
// Implementations: memstore (in-process) and redisstore (Redis and Redis Cluster).
type Store interface {
	// PutCampaign creates or updates a campaign (its entries are kept); created reports a
	// campaign the store did not have (new, or lost: see RecoverCampaign). A created campaign has no
	// numbers to hand out before a RaiseCeiling, and a new Incarnation.
	PutCampaign(ctx context.Context, c Campaign) (created bool, err error)
	// DeleteCampaign removes a campaign and its entries.
	DeleteCampaign(ctx context.Context, id string) error
	// Enter numbers the user's entry (the next number, Unconfirmed) and queues it, or returns
	// the user's existing entry with Created false. An entry is rejected at once when Stock
	// entries are admitted already. A user whose number RestoreEntries gave to another user has no
	// entry (here and in Entry). Errors: ErrCampaignNotFound, *NotOpenError, *CeilingError,
	// ErrNeedsRecovery.
	Enter(ctx context.Context, campaign, userKey, userID string) (EnterResult, error)
	// Entry returns the user's entry. Errors: ErrCampaignNotFound, ErrEntryNotFound.
	Entry(ctx context.Context, campaign, userKey, userID string) (Entry, error)
	// RaiseCeiling lets the store hand out the numbers of b: a block right above the ceiling extends
	// it; one further up moves the sequence to b.Lo (the numbers between are skipped); one at or
	// below the ceiling, or for another incarnation, changes nothing (applied false).
	// Errors: ErrCampaignNotFound.
	RaiseCeiling(ctx context.Context, campaign string, b Block) (applied bool, err error)
	// RecoverCampaign puts a campaign whose store lost data back in order: the sequence moves to
	// at least r.Floor and the ceiling to at least the sequence (numbers at or below the floor
	// are never handed out again; a block above it, raised since, is kept), and Admitted becomes
	// r.Admitted; the campaign no longer answers ErrNeedsRecovery. Entries are restored with
	// RestoreEntries. Errors: ErrCampaignNotFound.
	RecoverCampaign(ctx context.Context, campaign string, r Recovery) error
	// RestoreEntries writes entries as the database holds them: each user at its number (its
	// outcome, if decided, recorded; a pending one queued unless waiting or taken), confirmed;
	// the user's entry at another number is dropped, and another user at the same number loses
	// it, with its lease if taken (entries the store made after a loss). Errors:
	// ErrCampaignNotFound.
	RestoreEntries(ctx context.Context, campaign string, facts []Fact) error
	// ConfirmEntries marks entries the database now holds (UserKey and Entry.Number) confirmed,
	// where the store still holds them unconfirmed at that number; nothing else changes. A
	// campaign the store does not have is no error.
	ConfirmEntries(ctx context.Context, campaign string, facts []Fact) error
	// Take leases up to n entries to the caller for lease, oldest first: entries whose lease
	// ran out (their worker died) before new ones. Errors: ErrCampaignNotFound, ErrNeedsRecovery.
	Take(ctx context.Context, campaign string, n int, lease time.Duration) ([]Task, error)
	// Record stores the outcomes of taken entries and ends their leases. An entry recorded
	// already keeps its first outcome (a slow worker's late record changes nothing). An outcome
	// for an entry that is not (or no longer) its UserID's is refused and returned, and changes
	// nothing. Errors: ErrCampaignNotFound.
	Record(ctx context.Context, campaign string, outcomes []Outcome) (refused []Outcome, err error)
	// CampaignCounters returns the store's counters. Errors: ErrCampaignNotFound.
	CampaignCounters(ctx context.Context, campaign string) (Counters, error)
}

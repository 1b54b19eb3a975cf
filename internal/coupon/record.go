package coupon

import (
	"errors"
	"fmt"
	"time"
)

// CampaignRecord is a campaign as the database records it (package sqlstore): the Campaign a
// store enforces and the database's figures.
type CampaignRecord struct {
	Campaign
	// Issued counts the coupons issued (the counter whose CHECK keeps it within Stock).
	Issued int64
	// CreatedAt and UpdatedAt are set by the database's writer (UTC, ms).
	CreatedAt, UpdatedAt time.Time
	// Entries and Rejected count the campaign's entries in the database and those rejected.
	Entries, Rejected int64
	// EntryCeiling is the highest entry number reserved for the store (in blocks of
	// BlockSize): every number the store ever handed out is at most this.
	EntryCeiling int64
	// LastEntry is the highest entry number the database holds, 0 for none.
	LastEntry int64
}

// HasHistory reports a campaign whose entries the database holds (or whose numbers it
// reserved): a store that creates it anew has lost it, and must be recovered.
func (c CampaignRecord) HasHistory() bool { return c.EntryCeiling > 0 || c.Entries > 0 }

// Coupon is one issued coupon: at most one per user and campaign.
type Coupon struct {
	Campaign string
	UserID   string
	Code     string
	// Entry is the user's entry number (1-based, entry order).
	Entry    int64
	IssuedAt time.Time
}

// EntryRecord is one entry as the database holds it, with the user's coupon when one was
// issued. The database is the truth of entries: the store may lose them, and is put back in
// order from these (docs/durability.md).
type EntryRecord struct {
	Campaign string
	UserID   string
	// Number is the entry's number (1-based, entry order; numbers may skip, never repeat).
	Number int64
	// Rejected: the stock was gone (at once, or when the worker came to it).
	Rejected bool
	// Code is the user's coupon code, "" when none was issued.
	Code string
}

// Entry is the entry as its user sees it: ISSUED with a code, REJECTED, or PENDING.
func (r EntryRecord) Entry() Entry {
	e := Entry{Campaign: r.Campaign, UserID: r.UserID, Number: r.Number, Status: StatusPending}
	switch {
	case r.Code != "":
		e.Status, e.Code = StatusIssued, r.Code
	case r.Rejected:
		e.Status = StatusRejected
	}
	return e
}

// Errors of the campaigns, entries and coupons in the database (besides ErrCampaignNotFound
// and ErrEntryNotFound).
var (
	// ErrCouponNotFound: the user holds no coupon of the campaign.
	ErrCouponNotFound = errors.New("no coupon issued to this user")
	// ErrStockBelowIssued: a campaign's stock set below the coupons issued.
	ErrStockBelowIssued = errors.New("stock below the coupons issued")
	// ErrStockGone: every coupon of the stock is issued.
	ErrStockGone = errors.New("no coupon left")
	// ErrStaleEntry is matched by *StaleEntryError.
	ErrStaleEntry = errors.New("the entry number is not this user's")
)

// StaleEntryError refuses to issue for a (user, number) pair the database does not hold: the
// store's entry was made after it lost data. It matches ErrStaleEntry.
type StaleEntryError struct {
	// Held is the number the database holds for the user, 0 if none (the number is another
	// user's).
	Held int64
}

func (e *StaleEntryError) Error() string {
	return fmt.Sprintf("%s (the database holds %d for the user)", ErrStaleEntry, e.Held)
}

// Is makes errors.Is(err, ErrStaleEntry) hold.
func (e *StaleEntryError) Is(target error) bool { return target == ErrStaleEntry }

package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/sale"
)

// ErrNotFound is returned by the getters of the records that belong to no domain package
// (settings and snapshots). The domain's records answer their package's sentinel (see rowKind).
var ErrNotFound = errors.New("not found")

// rowKind names what a driver error means for one kind of record: the domain's sentinels that
// interpretError turns it into.
type rowKind struct {
	notFound error // the statement found no row (sql.ErrNoRows)
	exists   error // a unique or primary-key constraint refused the row
	orphan   error // a foreign key refused the row: what it belongs to is gone
}

// The kinds of record, by the sentinels of their domain.
var (
	eventRows    = rowKind{notFound: event.ErrNotFound}
	bookingRows  = rowKind{notFound: sale.ErrBookingNotFound}
	campaignRows = rowKind{notFound: coupon.ErrCampaignNotFound}
	entryRows    = rowKind{notFound: coupon.ErrEntryNotFound}
	couponRows   = rowKind{notFound: coupon.ErrCouponNotFound}
	keyRows      = rowKind{notFound: admin.ErrKeyNotFound, exists: admin.ErrKeyExists}
	recordRows   = rowKind{notFound: ErrNotFound} // settings, snapshots
)

// errRetry marks a transaction that lost a race with a concurrent one: it may be run again
// (retryable), which CreateBooking, JournalEntries and IssueCoupon do. It is no domain error:
// what still fails after the retries is the database's, which the HTTP layer answers 503.
var errRetry = errors.New("sqlstore: the transaction lost a race with a concurrent one")

// The SQLSTATEs interpretError knows (PostgreSQL's documentation, Appendix A); SQLite's result
// codes are modernc.org/sqlite/lib's constants.
const (
	pgUniqueViolation      = "23505"
	pgForeignKeyViolation  = "23503"
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
)

// interpretError is the one place where the errors of database/sql and of the drivers (pgx for
// PostgreSQL, modernc.org/sqlite) become what this package's callers know, so that none of
// them needs to know the SQL adapter:
//
//   - no row (sql.ErrNoRows) becomes r.notFound (e.g. event.ErrNotFound);
//   - a unique or primary-key violation (PostgreSQL 23505; SQLite SQLITE_CONSTRAINT_UNIQUE or
//     SQLITE_CONSTRAINT_PRIMARYKEY) becomes r.exists, wrapping the driver's error;
//   - a foreign-key violation (PostgreSQL 23503; SQLite SQLITE_CONSTRAINT_FOREIGNKEY) becomes
//     r.orphan, wrapping the driver's error (a booking of an event deleted meanwhile);
//   - a serialization failure or deadlock (PostgreSQL 40001, 40P01) or a busy database (SQLite
//     SQLITE_BUSY and its extended codes) is marked errRetry, wrapping the driver's error;
//
// anything else (or a kind r has no sentinel for) is returned as it is. nil stays nil.
func interpretError(err error, r rowKind) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) && r.notFound != nil {
		return r.notFound
	}
	var pe *pgconn.PgError
	var se *sqlite.Error
	var unique, orphan, retry bool
	switch {
	case errors.As(err, &pe):
		unique = pe.Code == pgUniqueViolation
		orphan = pe.Code == pgForeignKeyViolation
		retry = pe.Code == pgSerializationFailure || pe.Code == pgDeadlockDetected
	case errors.As(err, &se):
		unique = se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
		orphan = se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
		retry = se.Code()&0xff == sqlite3.SQLITE_BUSY
	}
	switch {
	case unique && r.exists != nil:
		return fmt.Errorf("%w: %w", r.exists, err)
	case orphan && r.orphan != nil:
		return fmt.Errorf("%w: %w", r.orphan, err)
	case retry:
		return fmt.Errorf("%w: %w", errRetry, err)
	}
	return err
}

// retryable reports an error interpretError marks errRetry: the transaction may be run again.
func retryable(err error) bool { return errors.Is(interpretError(err, rowKind{}), errRetry) }

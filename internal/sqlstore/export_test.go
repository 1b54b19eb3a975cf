package sqlstore

import (
	"context"

	"github.com/waitroom/waitroom/internal/coupon"

	"github.com/waitroom/waitroom/internal/sale"
)

// SetBeforeCommit makes CreateBooking call f with the booking after every write of its
// transaction and before the commit (f may block to hold the transaction open). Set it before
// any booking starts.
func SetBeforeCommit(db *DB, f func(sale.BookingRecord)) { db.beforeCommit = f }

// SetAfterStockRead makes IssueCoupon call f with the coupon after its transaction read the
// campaign's stock, before it updates the issued count. Set it before any issuing starts.
func SetAfterStockRead(db *DB, f func(coupon.Coupon)) { db.afterStockRead = f }

// OpenAt opens url with its migrations applied up to version only: the database as it was
// before a later migration, for that migration's test. Opening it again with Open applies the
// rest.
func OpenAt(ctx context.Context, url string, version int64) (*DB, error) {
	return OpenWith(ctx, url, Options{upTo: version})
}

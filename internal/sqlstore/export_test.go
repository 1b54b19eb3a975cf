package sqlstore

import "github.com/waitroom/waitroom/internal/sale"

// SetBeforeCommit makes CreateBooking call f with the booking after every write of its
// transaction and before the commit (f may block to hold the transaction open). Set it before
// any booking starts.
func SetBeforeCommit(db *DB, f func(sale.BookingRecord)) { db.beforeCommit = f }

package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Booking statuses.
const (
	BookingConfirmed = "CONFIRMED"
	BookingCancelled = "CANCELLED"
)

// Booking is a sale recorded in the database, the final arbiter: the schema makes a double
// sale impossible (one row per sold seat and event, units sold never above capacity, one
// booking per ticket).
type Booking struct {
	ID    string
	Event string
	// TicketID is the ticket id (as the API shows it) that booked; one booking per ticket.
	TicketID string
	HoldID   string
	// IdempotencyKey is the client's Idempotency-Key header, "" when none.
	IdempotencyKey string
	// TokenHash is the hex SHA-256 of the admission token the booking was made with.
	TokenHash string
	// UserKey is the booking user's key (token.UserKey in hex, the admission token's usr
	// claim), "" for an anonymous ticket. The event's max_per_user caps the units of one
	// user's confirmed bookings.
	UserKey  string
	Quantity int64
	Seats    []string // sorted; nil for general admission
	Status   string   // BookingConfirmed or BookingCancelled
	// CreatedAt and CancelledAt are set by the store (UTC, ms); CancelledAt is zero unless
	// cancelled.
	CreatedAt, CancelledAt time.Time
}

// Errors of CreateBooking.
var (
	// ErrSeatsTaken is matched by *SeatsTakenError.
	ErrSeatsTaken = errors.New("seats already sold")
	// ErrNotEnoughUnits: the booking would sell more than the capacity.
	ErrNotEnoughUnits = errors.New("not enough units left")
	// ErrNotForSale: the event has no capacity.
	ErrNotForSale = errors.New("event not for sale")
)

// ErrPurchaseLimit is matched by *PurchaseLimitError.
var ErrPurchaseLimit = errors.New("purchase limit reached")

// PurchaseLimitError refuses a booking that would take a user past the event's max_per_user:
// Remaining is how many units the user may still buy (0..Max).
type PurchaseLimitError struct{ Max, Remaining int64 }

func (e *PurchaseLimitError) Error() string {
	return fmt.Sprintf("at most %d units per user; %d remain", e.Max, e.Remaining)
}

// Is makes errors.Is(err, ErrPurchaseLimit) hold.
func (e *PurchaseLimitError) Is(target error) bool { return target == ErrPurchaseLimit }

// SeatsTakenError names the seats of a booking that another booking sold already.
type SeatsTakenError struct{ Seats []string }

func (e *SeatsTakenError) Error() string { return "seats already sold: " + strings.Join(e.Seats, ", ") }

// Is makes errors.Is(err, ErrSeatsTaken) hold.
func (e *SeatsTakenError) Is(target error) bool { return target == ErrSeatsTaken }

// BookResult reports CreateBooking.
type BookResult struct {
	Booking Booking
	// Created is false when the ticket had booked already: Booking is that booking.
	Created bool
	// Sold and Capacity are the event's counters after the booking (when Created).
	Sold, Capacity int64
}

// SoldOut reports whether the booking sold the last unit.
func (r BookResult) SoldOut() bool { return r.Capacity > 0 && r.Sold >= r.Capacity }

const bookingColumns = `id, event_id, ticket_id, hold_id, idempotency_key, token_hash, quantity, seats,
	status, created_at, cancelled_at, user_key`

func scanBooking(row rowScanner) (Booking, error) {
	var (
		b     Booking
		key   sql.NullString
		seats string
		user  sql.NullString
	)
	err := row.Scan(&b.ID, &b.Event, &b.TicketID, &b.HoldID, &key, &b.TokenHash, &b.Quantity, &seats,
		&b.Status, timeCol{&b.CreatedAt}, timeCol{&b.CancelledAt}, &user)
	if err != nil {
		return Booking{}, err
	}
	b.IdempotencyKey = key.String
	b.UserKey = user.String
	if seats != "" {
		b.Seats = strings.Split(seats, ",")
	}
	return b, nil
}

// forUpdate is the row-locking clause of the dialect (SQLite's transactions lock the database).
func (db *DB) forUpdate() string {
	if db.dialect == DialectPostgres {
		return " FOR UPDATE"
	}
	return ""
}

// putInventory keeps the event's inventory row (capacity and sold counter) in step with its
// capacity, inside PutEvent's transaction.
func (db *DB) putInventory(ctx context.Context, tx *sql.Tx, event string, capacity int64) error {
	var sold int64
	err := tx.QueryRowContext(ctx, db.rebind(`SELECT sold FROM inventory WHERE event_id = ?`+db.forUpdate()), event).Scan(&sold)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if capacity == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, db.rebind(`INSERT INTO inventory (event_id, capacity, sold) VALUES (?, ?, 0)
			ON CONFLICT (event_id) DO UPDATE SET capacity = excluded.capacity`), event, capacity)
		return err
	case err != nil:
		return err
	case capacity < sold:
		return &DropError{Sold: sold, Capacity: capacity}
	case capacity == 0:
		_, err = tx.ExecContext(ctx, db.rebind(`DELETE FROM inventory WHERE event_id = ?`), event)
		return err
	}
	_, err = tx.ExecContext(ctx, db.rebind(`UPDATE inventory SET capacity = ? WHERE event_id = ?`), capacity, event)
	return err
}

// retryable reports a PostgreSQL deadlock or serialization failure: the transaction may be
// run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// CreateBooking records b (ID, Event, TicketID, HoldID, IdempotencyKey, TokenHash, Quantity,
// Seats) as CONFIRMED in one transaction: the booking row, one row per seat, and the sold
// counter. If the ticket has booked already, that booking is returned with Created false and
// nothing changes. Errors: *SeatsTakenError (some seat is sold already), ErrNotEnoughUnits,
// ErrNotForSale, or a database error.
func (db *DB) CreateBooking(ctx context.Context, b Booking) (BookResult, error) {
	b.Seats = slices.Clone(b.Seats)
	slices.Sort(b.Seats) // one lock order for every transaction: no deadlock between seat inserts
	b.Status = BookingConfirmed
	b.CreatedAt = normTime(time.Now())
	b.CancelledAt = time.Time{}
	for attempt := 0; ; attempt++ {
		r, err := db.createBooking(ctx, b)
		if err != nil && retryable(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return BookResult{}, err
		}
		return r, nil
	}
}

func (db *DB) createBooking(ctx context.Context, b Booking) (_ BookResult, err error) {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO bookings (`+bookingColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)
		ON CONFLICT (event_id, ticket_id) DO NOTHING`),
		b.ID, b.Event, b.TicketID, b.HoldID, nullString(b.IdempotencyKey), b.TokenHash, b.Quantity,
		strings.Join(b.Seats, ","), b.Status, db.timeArg(b.CreatedAt), nullString(b.UserKey))
	if err != nil {
		return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: %w", err)
	} else if n == 0 {
		_ = tx.Rollback()
		committed = true
		prev, err := db.BookingByTicket(ctx, b.Event, b.TicketID)
		if err != nil {
			return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: the ticket's booking: %w", err)
		}
		return BookResult{Booking: prev}, nil
	}
	if len(b.Seats) > 0 {
		var q strings.Builder
		args := make([]any, 0, 3*len(b.Seats))
		q.WriteString(`INSERT INTO booking_seats (event_id, seat, booking_id) VALUES `)
		for i, s := range b.Seats {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?)")
			args = append(args, b.Event, s, b.ID)
		}
		q.WriteString(` ON CONFLICT (event_id, seat) DO NOTHING RETURNING seat`)
		rows, err := tx.QueryContext(ctx, db.rebind(q.String()), args...)
		if err != nil {
			return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: seats: %w", err)
		}
		got := map[string]bool{}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: seats: %w", err)
			}
			got[s] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: seats: %w", err)
		}
		if len(got) < len(b.Seats) {
			var taken []string
			for _, s := range b.Seats {
				if !got[s] {
					taken = append(taken, s)
				}
			}
			return BookResult{}, &SeatsTakenError{Seats: taken}
		}
	}
	// The counter last: its row lock is held only from here to the commit.
	r := BookResult{Booking: b, Created: true}
	err = tx.QueryRowContext(ctx, db.rebind(`UPDATE inventory SET sold = sold + ?
		WHERE event_id = ? AND sold + ? <= capacity RETURNING sold, capacity`), b.Quantity, b.Event, b.Quantity).
		Scan(&r.Sold, &r.Capacity)
	if errors.Is(err, sql.ErrNoRows) {
		var c int64
		if err := tx.QueryRowContext(ctx, db.rebind(`SELECT capacity FROM inventory WHERE event_id = ?`), b.Event).Scan(&c); errors.Is(err, sql.ErrNoRows) {
			return BookResult{}, ErrNotForSale
		}
		return BookResult{}, ErrNotEnoughUnits
	}
	if err != nil {
		return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: counter: %w", err)
	}
	if err := db.checkPurchaseLimit(ctx, tx, b); err != nil {
		return BookResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return BookResult{}, fmt.Errorf("sqlstore: CreateBooking: commit: %w", err)
	}
	committed = true
	return r, nil
}

// checkPurchaseLimit refuses b when it takes its user past the event's max_per_user. It runs
// after the sold counter's update, whose row lock serialises the bookings of one event on
// PostgreSQL (SQLite's transactions hold the database): the sum, read by a statement that
// starts after the lock was granted, sees every booking committed before, so no two
// concurrent bookings of one user can both pass.
func (db *DB) checkPurchaseLimit(ctx context.Context, tx *sql.Tx, b Booking) error {
	if b.UserKey == "" {
		return nil
	}
	var maxPer int64
	err := tx.QueryRowContext(ctx, db.rebind(`SELECT max_per_user FROM events WHERE id = ?`), b.Event).Scan(&maxPer)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && maxPer <= 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: max_per_user: %w", err)
	}
	var units int64 // this booking included
	if err := tx.QueryRowContext(ctx, db.rebind(`SELECT COALESCE(SUM(quantity), 0) FROM bookings
		WHERE event_id = ? AND user_key = ? AND status = ?`), b.Event, b.UserKey, BookingConfirmed).Scan(&units); err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: units of the user: %w", err)
	}
	if units > maxPer {
		return &PurchaseLimitError{Max: maxPer, Remaining: max(0, maxPer-(units-b.Quantity))}
	}
	return nil
}

// GetBooking returns the booking with the given id, or ErrNotFound.
func (db *DB) GetBooking(ctx context.Context, id string) (Booking, error) {
	b, err := scanBooking(db.sql.QueryRowContext(ctx, db.rebind(`SELECT `+bookingColumns+` FROM bookings WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Booking{}, ErrNotFound
	}
	if err != nil {
		return Booking{}, fmt.Errorf("sqlstore: GetBooking: %w", err)
	}
	return b, nil
}

// BookingByTicket returns the booking made by a ticket of an event, or ErrNotFound.
func (db *DB) BookingByTicket(ctx context.Context, event, ticketID string) (Booking, error) {
	b, err := scanBooking(db.sql.QueryRowContext(ctx,
		db.rebind(`SELECT `+bookingColumns+` FROM bookings WHERE event_id = ? AND ticket_id = ?`), event, ticketID))
	if errors.Is(err, sql.ErrNoRows) {
		return Booking{}, ErrNotFound
	}
	if err != nil {
		return Booking{}, fmt.Errorf("sqlstore: BookingByTicket: %w", err)
	}
	return b, nil
}

// CancelBooking cancels a confirmed booking in one transaction: its status, its seats freed,
// the sold counter lowered. changed is false (and b the booking) when it was cancelled
// already. Errors: ErrNotFound, or a database error.
func (db *DB) CancelBooking(ctx context.Context, id string) (b Booking, changed bool, err error) {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return Booking{}, false, fmt.Errorf("sqlstore: CancelBooking: %w", err)
	}
	defer func() {
		if err != nil || !changed {
			_ = tx.Rollback()
		}
	}()
	b, err = scanBooking(tx.QueryRowContext(ctx, db.rebind(`SELECT `+bookingColumns+` FROM bookings WHERE id = ?`+db.forUpdate()), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Booking{}, false, ErrNotFound
	}
	if err != nil {
		return Booking{}, false, fmt.Errorf("sqlstore: CancelBooking: %w", err)
	}
	if b.Status != BookingConfirmed {
		return b, false, nil
	}
	now := normTime(time.Now())
	if _, err = tx.ExecContext(ctx, db.rebind(`UPDATE bookings SET status = ?, cancelled_at = ? WHERE id = ?`),
		BookingCancelled, db.timeArg(now), id); err != nil {
		return Booking{}, false, fmt.Errorf("sqlstore: CancelBooking: %w", err)
	}
	if _, err = tx.ExecContext(ctx, db.rebind(`DELETE FROM booking_seats WHERE booking_id = ?`), id); err != nil {
		return Booking{}, false, fmt.Errorf("sqlstore: CancelBooking: seats: %w", err)
	}
	if _, err = tx.ExecContext(ctx, db.rebind(`UPDATE inventory SET sold = sold - ? WHERE event_id = ?`), b.Quantity, b.Event); err != nil {
		return Booking{}, false, fmt.Errorf("sqlstore: CancelBooking: counter: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return Booking{}, false, fmt.Errorf("sqlstore: CancelBooking: commit: %w", err)
	}
	b.Status, b.CancelledAt = BookingCancelled, now
	return b, true, nil
}

// SoldBookings returns the confirmed bookings of an event (the sold state a store restores),
// ordered by id.
func (db *DB) SoldBookings(ctx context.Context, event string) ([]Booking, error) {
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT `+bookingColumns+` FROM bookings
		WHERE event_id = ? AND status = ? ORDER BY id`), event, BookingConfirmed)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: SoldBookings: %w", err)
	}
	defer rows.Close()
	out := []Booking{}
	for rows.Next() {
		b, err := scanBooking(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: SoldBookings: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: SoldBookings: %w", err)
	}
	return out, nil
}

// CancelledBookingIDs returns the ids of an event's cancelled bookings, ordered by id.
func (db *DB) CancelledBookingIDs(ctx context.Context, event string) ([]string, error) {
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT id FROM bookings WHERE event_id = ? AND status = ? ORDER BY id`),
		event, BookingCancelled)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: CancelledBookingIDs: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlstore: CancelledBookingIDs: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// Inventory returns an event's capacity and units sold. Errors: ErrNotFound (not for sale).
func (db *DB) Inventory(ctx context.Context, event string) (capacity, sold int64, err error) {
	err = db.sql.QueryRowContext(ctx, db.rebind(`SELECT capacity, sold FROM inventory WHERE event_id = ?`), event).Scan(&capacity, &sold)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, ErrNotFound
	}
	if err != nil {
		return 0, 0, fmt.Errorf("sqlstore: Inventory: %w", err)
	}
	return capacity, sold, nil
}

// SoldSeatCount returns how many seat rows an event has sold (for checks and tests).
func (db *DB) SoldSeatCount(ctx context.Context, event string) (int64, error) {
	var n int64
	err := db.sql.QueryRowContext(ctx, db.rebind(`SELECT COUNT(*) FROM booking_seats WHERE event_id = ?`), event).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: SoldSeatCount: %w", err)
	}
	return n, nil
}

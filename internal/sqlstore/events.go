package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Event is an event's stored configuration (the JSON API shape lives elsewhere).
//
// The store does not validate the values beyond what both backends can store (non-empty ID,
// finite AdmitRate); that is the job of the API layer.
type Event struct {
	// ID is the event's key; ListEvents orders by it, byte-wise.
	ID   string
	Name string
	// MaxActive is the maximum number of admitted sessions at once.
	MaxActive int64
	// AdmitRate is in admissions per second; 0 means bounded by MaxActive only.
	AdmitRate float64
	// SessionTTL is stored as whole seconds (session_ttl_s), truncated toward zero.
	SessionTTL time.Duration
	// ClaimTTL is stored as whole seconds (claim_ttl_s), truncated toward zero.
	ClaimTTL time.Duration
	// OpensAt is zero when not set (NULL). Stored in UTC with millisecond precision.
	OpensAt time.Time
	// ClosesAt is zero when not set (NULL). Stored in UTC with millisecond precision.
	ClosesAt time.Time
	// RedirectURL is "" when not set (NULL).
	RedirectURL string
	// Generation is a random id of the event's line, chosen at creation and kept on update.
	Generation uint32
	// Capacity is the number of units for sale; 0 = not for sale (NULL). PutEvent keeps the
	// inventory row (the sold counter) in step and refuses a capacity below the units sold
	// (ErrCapacityBelowSold).
	Capacity int64
	// Seats names the seats of a seated event (nil = general admission), stored as a JSON array.
	Seats []string
	// SeatMap is the seat_map JSON the seats were expanded from, "" when none (kept to show it).
	SeatMap string
	// MaxPerBooking caps one hold (0 is stored as the default, 4).
	MaxPerBooking int64
	// HoldTTL is stored as whole seconds (hold_ttl_s; 0 is stored as the default, 300).
	HoldTTL time.Duration
	// CreatedAt and UpdatedAt are set by the store (UTC, millisecond precision); the values
	// passed to PutEvent are ignored.
	CreatedAt, UpdatedAt time.Time
}

const eventColumns = `id, name, max_active, admit_rate, session_ttl_s, claim_ttl_s,
	opens_at, closes_at, redirect_url, generation, created_at, updated_at,
	capacity, seats, seat_map, max_per_booking, hold_ttl_s`

// normalize returns e as it will be read back: whole-second TTLs, UTC millisecond times.
func (e Event) normalize() Event {
	e.SessionTTL = e.SessionTTL.Truncate(time.Second)
	e.ClaimTTL = e.ClaimTTL.Truncate(time.Second)
	e.OpensAt = normTime(e.OpensAt)
	e.ClosesAt = normTime(e.ClosesAt)
	e.CreatedAt = normTime(e.CreatedAt)
	e.UpdatedAt = normTime(e.UpdatedAt)
	e.HoldTTL = e.HoldTTL.Truncate(time.Second)
	if e.MaxPerBooking == 0 {
		e.MaxPerBooking = 4
	}
	if e.HoldTTL == 0 {
		e.HoldTTL = 300 * time.Second
	}
	if len(e.Seats) == 0 {
		e.Seats = nil
	}
	return e
}

// ErrCapacityBelowSold is returned by PutEvent for a capacity below the units already sold
// (or no capacity while units are sold).
var ErrCapacityBelowSold = errors.New("capacity below the units sold")

type rowScanner interface{ Scan(dest ...any) error }

func scanEvent(row rowScanner) (Event, error) {
	var (
		e                Event
		sessTTL, claimTT int64
		redirect         sql.NullString
		gen              int64
		capacity         sql.NullInt64
		seats, seatMap   sql.NullString
		holdTTL          int64
	)
	err := row.Scan(&e.ID, &e.Name, &e.MaxActive, &e.AdmitRate, &sessTTL, &claimTT,
		timeCol{&e.OpensAt}, timeCol{&e.ClosesAt}, &redirect, &gen,
		timeCol{&e.CreatedAt}, timeCol{&e.UpdatedAt},
		&capacity, &seats, &seatMap, &e.MaxPerBooking, &holdTTL)
	if err != nil {
		return Event{}, err
	}
	e.Capacity = capacity.Int64
	if seats.Valid && seats.String != "" {
		if err := json.Unmarshal([]byte(seats.String), &e.Seats); err != nil {
			return Event{}, fmt.Errorf("seats of %q: %w", e.ID, err)
		}
	}
	e.SeatMap = seatMap.String
	e.HoldTTL = time.Duration(holdTTL) * time.Second
	e.SessionTTL = time.Duration(sessTTL) * time.Second
	e.ClaimTTL = time.Duration(claimTT) * time.Second
	e.RedirectURL = redirect.String
	e.Generation = uint32(gen)
	return e, nil
}

// nullString maps "" to NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// newGeneration returns a random non-zero uint32.
func newGeneration() (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if g := binary.BigEndian.Uint32(b[:]); g != 0 {
			return g, nil
		}
	}
}

// PutEvent inserts e, or updates the event with the same ID, in one transaction; created
// reports an insert.
//
// On insert, Generation is e.Generation when non-zero, else a new random non-zero value. On
// update the stored Generation and CreatedAt are kept (the argument's are ignored) and returned
// in the result. CreatedAt and UpdatedAt are set to the current time (UTC, millisecond
// precision; UpdatedAt only on update). stored is the record as GetEvent will return it:
// TTLs truncated to whole seconds and times in UTC truncated to the millisecond.
//
// Errors: an empty ID, a NaN or infinite AdmitRate, or a database error (including ctx's).
func (db *DB) PutEvent(ctx context.Context, e Event) (stored Event, created bool, err error) {
	if e.ID == "" {
		return Event{}, false, errors.New("sqlstore: PutEvent: empty event ID")
	}
	if math.IsNaN(e.AdmitRate) || math.IsInf(e.AdmitRate, 0) {
		// PostgreSQL would store them, SQLite would not: refuse on both.
		return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: AdmitRate must be finite, got %v", e.ID, e.AdmitRate)
	}
	e = e.normalize()
	if e.Generation == 0 {
		if e.Generation, err = newGeneration(); err != nil {
			return Event{}, false, fmt.Errorf("sqlstore: PutEvent: generation: %w", err)
		}
	}
	now := normTime(time.Now())

	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()

	insert := db.rebind(`INSERT INTO events (` + eventColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`)
	update := db.rebind(`UPDATE events SET name = ?, max_active = ?, admit_rate = ?,
		session_ttl_s = ?, claim_ttl_s = ?, opens_at = ?, closes_at = ?, redirect_url = ?,
		updated_at = ?, capacity = ?, seats = ?, seat_map = ?, max_per_booking = ?, hold_ttl_s = ?
		WHERE id = ?
		RETURNING generation, created_at`)
	var seatsArg any
	if len(e.Seats) > 0 {
		b, err := json.Marshal(e.Seats)
		if err != nil {
			return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: seats: %w", e.ID, err)
		}
		seatsArg = string(b)
	}
	var capacityArg any
	if e.Capacity > 0 {
		capacityArg = e.Capacity
	}

	// The loop only repeats on PostgreSQL, when the row that made the insert a no-op is deleted
	// by a concurrent transaction before the update (each statement sees the latest committed
	// data at read committed isolation). On SQLite the transaction holds the write lock.
	for attempt := 0; ; attempt++ {
		res, err := tx.ExecContext(ctx, insert,
			e.ID, e.Name, e.MaxActive, e.AdmitRate,
			int64(e.SessionTTL/time.Second), int64(e.ClaimTTL/time.Second),
			db.timeArg(e.OpensAt), db.timeArg(e.ClosesAt), nullString(e.RedirectURL),
			int64(e.Generation), db.timeArg(now), db.timeArg(now),
			capacityArg, seatsArg, nullString(e.SeatMap), e.MaxPerBooking, int64(e.HoldTTL/time.Second))
		if err != nil {
			return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: insert: %w", e.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: insert: %w", e.ID, err)
		}
		if n == 1 {
			created = true
			e.CreatedAt, e.UpdatedAt = now, now
			break
		}

		var gen int64
		err = tx.QueryRowContext(ctx, update,
			e.Name, e.MaxActive, e.AdmitRate,
			int64(e.SessionTTL/time.Second), int64(e.ClaimTTL/time.Second),
			db.timeArg(e.OpensAt), db.timeArg(e.ClosesAt), nullString(e.RedirectURL),
			db.timeArg(now), capacityArg, seatsArg, nullString(e.SeatMap), e.MaxPerBooking, int64(e.HoldTTL/time.Second),
			e.ID,
		).Scan(&gen, timeCol{&e.CreatedAt})
		if errors.Is(err, sql.ErrNoRows) && attempt < 5 {
			continue
		}
		if err != nil {
			return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: update: %w", e.ID, err)
		}
		e.Generation = uint32(gen)
		e.UpdatedAt = now
		break
	}
	if err = db.putInventory(ctx, tx, e.ID, e.Capacity); err != nil {
		return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, err)
	}
	if err = tx.Commit(); err != nil {
		return Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: commit: %w", e.ID, err)
	}
	return e, created, nil
}

// GetEvent returns the event with the given ID, or ErrNotFound.
func (db *DB) GetEvent(ctx context.Context, id string) (Event, error) {
	row := db.sql.QueryRowContext(ctx, db.rebind(`SELECT `+eventColumns+` FROM events WHERE id = ?`), id)
	e, err := scanEvent(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("sqlstore: GetEvent %q: %w", id, err)
	}
	return e, nil
}

// ListEvents returns all events ordered by ID (byte-wise); an empty, non-nil slice when there
// are none.
func (db *DB) ListEvents(ctx context.Context) ([]Event, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT `+eventColumns+` FROM events ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: ListEvents: %w", err)
	}
	defer rows.Close()
	events := []Event{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: ListEvents: %w", err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: ListEvents: %w", err)
	}
	return events, nil
}

// DeleteEvent deletes the event with the given ID; deleted is false (and err nil) when there
// was none.
func (db *DB) DeleteEvent(ctx context.Context, id string) (deleted bool, err error) {
	res, err := db.sql.ExecContext(ctx, db.rebind(`DELETE FROM events WHERE id = ?`), id)
	if err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	return n > 0, nil
}

package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/sale"
)

const bookingColumns = `id, event_id, ticket_id, hold_id, idempotency_key, token_hash, quantity, seats,
	status, created_at, cancelled_at, user_key`

func scanBooking(row rowScanner) (sale.BookingRecord, error) {
	var (
		b     sale.BookingRecord
		key   sql.NullString
		seats string
		user  sql.NullString
	)
	err := row.Scan(&b.ID, &b.Event, &b.TicketID, &b.HoldID, &key, &b.TokenHash, &b.Quantity, &seats,
		&b.Status, timeCol{&b.CreatedAt}, timeCol{&b.CancelledAt}, &user)
	if err != nil {
		return sale.BookingRecord{}, err
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

// inventorySlots is how many rows of inventory_slots hold an event's capacity and units sold.
// The units for sale are shared out between the slots (each row's CHECK keeps its sold within
// its capacity, and the capacities add up to the event's); a booking takes its units from one
// slot, so concurrent bookings of one event do not queue on one row lock, which is held until
// the commit is flushed. The event's figures are the sums (Inventory).
const inventorySlots = 16

// slotRow is one row of inventory_slots.
type slotRow struct{ slot, capacity, sold int64 }

func (r slotRow) room() int64 { return r.capacity - r.sold }

// readSlots returns the event's slot rows ordered by slot, with lock each row locked in that
// order (PostgreSQL; SQLite's transactions hold the whole database).
func (db *DB) readSlots(ctx context.Context, tx *sql.Tx, event string, lock bool) ([]slotRow, error) {
	q := `SELECT slot, capacity, sold FROM inventory_slots WHERE event_id = ? ORDER BY slot`
	if lock {
		q += db.forUpdate()
	}
	return scanSlots(tx.QueryContext(ctx, db.rebind(q), event))
}

func scanSlots(rows *sql.Rows, err error) ([]slotRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []slotRow
	for rows.Next() {
		var r slotRow
		if err := rows.Scan(&r.slot, &r.capacity, &r.sold); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// shareOut sets the capacities of rows (slots 0..inventorySlots-1, their sold counts final) so
// that room units remain for sale, shared out evenly: the capacities then add up to the units
// sold plus room.
func shareOut(rows []slotRow, room int64) {
	n := int64(len(rows))
	for i := range rows {
		rows[i].capacity = rows[i].sold + room/n
		if int64(i) < room%n {
			rows[i].capacity++
		}
	}
}

// fullSlots returns rows completed with the slots it lacks (0 sold), ordered by slot.
func fullSlots(rows []slotRow) []slotRow {
	out := make([]slotRow, inventorySlots)
	for i := range out {
		out[i].slot = int64(i)
	}
	for _, r := range rows {
		if r.slot >= 0 && r.slot < inventorySlots {
			out[r.slot] = r
		}
	}
	return out
}

// writeSlots writes rows (their capacity and sold) in one statement, inserting missing ones.
func (db *DB) writeSlots(ctx context.Context, tx *sql.Tx, event string, rows []slotRow) error {
	var q strings.Builder
	args := make([]any, 0, 4*len(rows))
	q.WriteString(`INSERT INTO inventory_slots (event_id, slot, capacity, sold) VALUES `)
	for i, r := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?)")
		args = append(args, event, r.slot, r.capacity, r.sold)
	}
	q.WriteString(` ON CONFLICT (event_id, slot) DO UPDATE SET capacity = excluded.capacity, sold = excluded.sold`)
	_, err := tx.ExecContext(ctx, db.rebind(q.String()), args...)
	return err
}

// putInventory keeps the event's inventory (its slot rows: capacity and units sold) in step with
// its capacity, inside PutEvent's transaction: the units left for sale are shared out between
// the slots again.
func (db *DB) putInventory(ctx context.Context, tx *sql.Tx, eventID string, capacity int64) error {
	rows, err := db.readSlots(ctx, tx, eventID, true)
	if err != nil {
		return err
	}
	var sold, have int64
	for _, r := range rows {
		sold += r.sold
		have += r.capacity
	}
	switch {
	case capacity < sold:
		return &event.DropError{Sold: sold, Capacity: capacity}
	case capacity == 0:
		if len(rows) == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, db.rebind(`DELETE FROM inventory_slots WHERE event_id = ?`), eventID)
		return err
	case have == capacity && len(rows) == inventorySlots:
		return nil // unchanged
	}
	rows = fullSlots(rows)
	shareOut(rows, capacity-sold)
	return db.writeSlots(ctx, tx, eventID, rows)
}

// errSlotFilled: the slot a booking locked had no room left for it; the booking is written
// again, taking its units from every slot (takeUnits with spread).
var errSlotFilled = errors.New("the inventory slot filled up")

// takeUnits counts q more units sold for event in tx. Unless spread, it reads the slots
// without a lock and takes the units from one with room, locking only that one: a slot no
// other transaction holds if any (SKIP LOCKED), else one it waits for. Lock order: a
// transaction holds one slot, or every slot taken in slot order (spread, PutEvent,
// CancelBooking), and never waits for another lock while it holds one slot: so no deadlock.
// The slot may have filled since the read; then errSlotFilled, after which the caller rolls
// back (releasing that lock) and writes the booking again with spread. With spread, or when no
// slot alone has room, every slot is locked, the units taken from those with room, and what
// remains is shared out between the slots again. Errors: sale.ErrNotForSale (no slot rows),
// sale.ErrNotEnoughUnits, errSlotFilled, or the database's.
func (db *DB) takeUnits(ctx context.Context, tx *sql.Tx, event string, q int64, spread bool) error {
	rows, err := db.readSlots(ctx, tx, event, spread)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return sale.ErrNotForSale
	}
	if !spread {
		var cands []int64
		for _, r := range rows {
			if r.room() >= q {
				cands = append(cands, r.slot)
			}
		}
		if len(cands) > 0 {
			return db.takeFromOne(ctx, tx, event, q, cands)
		}
		// No slot alone has room (as of the read): lock every slot. None is held yet.
		if rows, err = db.readSlots(ctx, tx, event, true); err != nil {
			return err
		}
		if len(rows) == 0 {
			return sale.ErrNotForSale
		}
	}
	var room int64
	for _, r := range rows {
		room += r.room()
	}
	if room < q {
		return sale.ErrNotEnoughUnits
	}
	rows = fullSlots(rows)
	left := q
	for i := range rows {
		take := min(left, max(rows[i].room(), 0))
		rows[i].sold += take
		left -= take
	}
	shareOut(rows, room-q)
	return db.writeSlots(ctx, tx, event, rows)
}

// takeFromOne counts q units sold in one of the event's slots among cands (slot numbers with
// room as of takeUnits' read). PostgreSQL: it locks a random one that no other transaction
// holds and adds to it if it still has room, in one statement (the lock is held from there to
// the commit); when every one is held, it waits for a random one. SQLite: a random one (the
// transaction holds the database, so the read is current). Errors: errSlotFilled (the
// slot locked has no room left for q, or was deleted meanwhile), or the database's.
func (db *DB) takeFromOne(ctx context.Context, tx *sql.Tx, event string, q int64, cands []int64) error {
	pick := cands[rand.IntN(len(cands))]
	add := func(query string, args ...any) (locked, took int64, err error) {
		err = tx.QueryRowContext(ctx, db.rebind(query), args...).Scan(&locked, &took)
		return locked, took, err
	}
	if db.dialect != DialectPostgres {
		res, err := tx.ExecContext(ctx, `UPDATE inventory_slots SET sold = sold + ?
			WHERE event_id = ? AND slot = ? AND sold + ? <= capacity`, q, event, pick, q)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, errSlotFilled) // not reached: the read is current
		}
		return nil
	}
	var in strings.Builder
	args := make([]any, 0, len(cands)+2)
	args = append(args, event)
	for i, c := range cands {
		if i > 0 {
			in.WriteString(", ")
		}
		in.WriteString("?")
		args = append(args, c)
	}
	args = append(args, q, event, q)
	// pick names keys only, so the one row it locks is the one it returns; took adds to it if
	// the row as it is now has room (its own WHERE, rechecked on the locked row: pick's copy
	// can be older when another booking re-spread the capacities, TestRaceForSeats in CI).
	const took = `took AS (UPDATE inventory_slots s SET sold = s.sold + ? FROM pick
		WHERE s.event_id = ? AND s.slot = pick.slot AND s.sold + ? <= s.capacity RETURNING s.slot)
		SELECT (SELECT count(*) FROM pick), (SELECT count(*) FROM took)`
	locked, n, err := add(`WITH pick AS (SELECT slot, capacity, sold FROM inventory_slots
		WHERE event_id = ? AND slot IN (`+in.String()+`) ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED), `+took, args...)
	if err == nil && locked == 0 {
		// Every candidate is held by another booking: wait for one.
		locked, n, err = add(`WITH pick AS (SELECT slot, capacity, sold FROM inventory_slots
			WHERE event_id = ? AND slot = ? FOR UPDATE), `+took, event, pick, q, event, q)
	}
	if err == nil && n == 0 {
		err = errSlotFilled
	}
	return err
}

// giveBack counts q fewer units sold for event in tx (a cancellation): every slot is locked in
// slot order, the units taken off slots that sold some, and the room shared out again.
func (db *DB) giveBack(ctx context.Context, tx *sql.Tx, event string, q int64) error {
	rows, err := db.readSlots(ctx, tx, event, true)
	if err != nil {
		return err
	}
	var room, sold int64
	for _, r := range rows {
		room += r.room()
		sold += r.sold
	}
	if sold < q {
		return fmt.Errorf("the inventory counts %d units sold, fewer than the booking's %d", sold, q)
	}
	rows = fullSlots(rows)
	left := q
	for i := range rows {
		take := min(left, rows[i].sold)
		rows[i].sold -= take
		left -= take
	}
	shareOut(rows, room+q)
	return db.writeSlots(ctx, tx, event, rows)
}

// CreateBooking records b (ID, Event, TicketID, HoldID, IdempotencyKey, TokenHash, Quantity,
// Seats, UserKey) as CONFIRMED in one transaction: the booking row, one row per seat, and its
// units counted sold in one of the event's inventory slots (see inventorySlots), so that
// concurrent bookings of one event do not wait for each other's commits; created is true. If
// the ticket has booked already, that booking is returned with created false and nothing
// changes. A transaction that lost a race (retryable) is run again, up to 5 times. Errors:
// *sale.SeatsTakenError (some seat is sold already), *sale.InvalidError (the event no longer
// sells what the booking holds: sells), *sale.PurchaseLimitError,
// sale.ErrNotEnoughUnits, sale.ErrNotForSale, event.ErrNotFound (the event was deleted, or
// created again since b's hold: b.Epoch), or a database error.
func (db *DB) CreateBooking(ctx context.Context, b sale.BookingRecord) (stored sale.BookingRecord, created bool, err error) {
	b.Seats = slices.Clone(b.Seats)
	slices.Sort(b.Seats) // one lock order for every transaction: no deadlock between seat inserts
	b.Status = sale.BookingConfirmed
	b.CreatedAt = normTime(time.Now())
	b.CancelledAt = time.Time{}
	spread := false
	for attempt := 0; ; attempt++ {
		stored, created, err = db.createBooking(ctx, b, spread)
		if errors.Is(err, errSlotFilled) && !spread {
			spread = true // once: with spread, takeUnits does not answer errSlotFilled
			continue
		}
		if err != nil && retryable(err) && attempt < 5 {
			continue
		}
		return stored, created, err
	}
}

// createBooking is one attempt of CreateBooking; spread is takeUnits'. Its locks, in the order
// taken: the booking row, the seats (sorted), the user's purchase lock (checkPurchaseLimit),
// then inventory slots (takeUnits).
func (db *DB) createBooking(ctx context.Context, b sale.BookingRecord, spread bool) (_ sale.BookingRecord, created bool, err error) {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: %w", err)
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
		// An event deleted while its booking was on the way: event.ErrNotFound, a known outcome.
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: %w", interpretError(err, rowKind{orphan: event.ErrNotFound}))
	}
	if n, err := res.RowsAffected(); err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: %w", err)
	} else if n == 0 {
		_ = tx.Rollback()
		committed = true
		prev, err := db.BookingByTicket(ctx, b.Event, b.TicketID)
		if err != nil {
			return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: the ticket's booking: %w", err)
		}
		return prev, false, nil
	}
	if err := db.sells(ctx, tx, b); err != nil {
		return sale.BookingRecord{}, false, err
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
			return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: seats: %w", err)
		}
		got := map[string]bool{}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: seats: %w", err)
			}
			got[s] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: seats: %w", err)
		}
		if len(got) < len(b.Seats) {
			var taken []string
			for _, s := range b.Seats {
				if !got[s] {
					taken = append(taken, s)
				}
			}
			return sale.BookingRecord{}, false, &sale.SeatsTakenError{Seats: taken}
		}
	}
	if err := db.checkPurchaseLimit(ctx, tx, b); err != nil {
		return sale.BookingRecord{}, false, err
	}
	// The units last: a slot's lock is held only from here to the commit.
	if err := db.takeUnits(ctx, tx, b.Event, b.Quantity, spread); err != nil {
		if errors.Is(err, sale.ErrNotForSale) || errors.Is(err, sale.ErrNotEnoughUnits) || errors.Is(err, errSlotFilled) {
			return sale.BookingRecord{}, false, err
		}
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: inventory: %w", err)
	}
	if db.beforeCommit != nil {
		db.beforeCommit(b)
	}
	if err := tx.Commit(); err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CreateBooking: commit: %w", err)
	}
	committed = true
	b.Epoch = "" // checked, not stored: the record as the database holds it
	return b, true, nil
}

// sells refuses b unless the event in the database is of b's life (b.Epoch, when set; else
// event.ErrNotFound) and its configuration sells what b books (else a *sale.InvalidError):
// seats the event lists on a seated event, a quantity on one of general
// admission. Its hold was made under an earlier configuration when an event write took a seat
// off the list (or changed the kind) meanwhile; the store drops such holds once it gets the
// new inventory, and this closes the moment before. On PostgreSQL the event's row is locked
// for share until the commit: an event write waits for the booking (and then finds its seats
// sold: keepsSoldSeats), or the booking waits for the write and reads the new list. A seat
// matches the list's JSON text as "seat" (sale.SeatRule holds no quote or backslash, so the
// text holds it exactly when the list does), without decoding a list of up to 50,000 seats.
func (db *DB) sells(ctx context.Context, tx *sql.Tx, b sale.BookingRecord) error {
	lock, find := "", "instr(seats, x.column1)"
	if db.dialect == DialectPostgres {
		lock, find = " FOR SHARE", "strpos(seats, x.column1)"
	}
	var (
		seated bool
		seed   sql.NullString
	)
	err := tx.QueryRowContext(ctx, db.rebind(`SELECT COALESCE(seats, '') <> '', draw_seed FROM events WHERE id = ?`+lock), b.Event).Scan(&seated, &seed)
	if err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: the event's seats: %w", interpretError(err, eventRows))
	}
	if b.Epoch != "" {
		var life event.Event
		if seed.Valid {
			if life.DrawSeed, err = draw.ParseSeed(seed.String); err != nil {
				return fmt.Errorf("sqlstore: CreateBooking: draw_seed of %q: %w", b.Event, err)
			}
		}
		if life.Epoch() != b.Epoch {
			// The event was deleted and created again while this booking was on its way: its
			// hold was of the old life, which is gone with its bookings.
			return fmt.Errorf("sqlstore: CreateBooking: event %s was created again: %w", b.Event, event.ErrNotFound)
		}
	}
	switch {
	case seated && len(b.Seats) == 0:
		return &sale.InvalidError{Reason: "event " + b.Event + " sells named seats now, not a quantity: hold seats again"}
	case !seated && len(b.Seats) > 0:
		return &sale.InvalidError{Reason: "event " + b.Event + " sells a quantity now, not named seats: hold a quantity again"}
	case !seated:
		return nil
	}
	var q strings.Builder
	args := make([]any, 0, len(b.Seats)+1)
	q.WriteString(`SELECT x.column1 FROM (VALUES `)
	for i, s := range b.Seats {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?)")
		args = append(args, `"`+s+`"`)
	}
	q.WriteString(`) AS x WHERE NOT EXISTS (SELECT 1 FROM events WHERE id = ? AND ` + find + ` > 0)`)
	args = append(args, b.Event)
	rows, err := tx.QueryContext(ctx, db.rebind(q.String()), args...)
	if err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: the event's seats: %w", err)
	}
	defer rows.Close()
	var dropped []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return fmt.Errorf("sqlstore: CreateBooking: the event's seats: %w", err)
		}
		dropped = append(dropped, strings.Trim(s, `"`))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: the event's seats: %w", err)
	}
	if len(dropped) > 0 {
		return &sale.InvalidError{Reason: "seats not for sale in event " + b.Event + " (taken off its list): hold again", Seats: dropped}
	}
	return nil
}

// checkPurchaseLimit refuses b when it takes its user past the event's max_per_user. On
// PostgreSQL it first takes a transaction-scoped advisory lock on the event and user, which
// serialises the bookings of one user of one event (SQLite's transactions hold the database):
// the sum, read by a statement that starts after the lock was granted, sees every booking of
// the user committed before, so no two concurrent bookings of one user can both pass.
func (db *DB) checkPurchaseLimit(ctx context.Context, tx *sql.Tx, b sale.BookingRecord) error {
	if b.UserKey == "" {
		return nil
	}
	var maxPer int64
	err := interpretError(tx.QueryRowContext(ctx, db.rebind(`SELECT max_per_user FROM events WHERE id = ?`), b.Event).Scan(&maxPer), eventRows)
	if errors.Is(err, event.ErrNotFound) || (err == nil && maxPer <= 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: max_per_user: %w", err)
	}
	if db.dialect == DialectPostgres {
		// A 64-bit hash of the pair: a collision only makes two users' bookings take turns.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
			"purchase limit/"+b.Event+"/"+b.UserKey); err != nil {
			return fmt.Errorf("sqlstore: CreateBooking: the user's purchase lock: %w", err)
		}
	}
	var units int64 // this booking included
	if err := tx.QueryRowContext(ctx, db.rebind(`SELECT COALESCE(SUM(quantity), 0) FROM bookings
		WHERE event_id = ? AND user_key = ? AND status = ?`), b.Event, b.UserKey, sale.BookingConfirmed).Scan(&units); err != nil {
		return fmt.Errorf("sqlstore: CreateBooking: units of the user: %w", err)
	}
	if units > maxPer {
		return &sale.PurchaseLimitError{Max: maxPer, Remaining: max(0, maxPer-(units-b.Quantity))}
	}
	return nil
}

// GetBooking returns the booking with the given id. Errors: sale.ErrBookingNotFound, or the
// database's.
func (db *DB) GetBooking(ctx context.Context, id string) (sale.BookingRecord, error) {
	b, err := scanBooking(db.sql.QueryRowContext(ctx, db.rebind(`SELECT `+bookingColumns+` FROM bookings WHERE id = ?`), id))
	if err != nil {
		return sale.BookingRecord{}, fmt.Errorf("sqlstore: GetBooking: %w", interpretError(err, bookingRows))
	}
	return b, nil
}

// BookingByTicket returns the booking made by a ticket of an event. Errors:
// sale.ErrBookingNotFound, or the database's.
func (db *DB) BookingByTicket(ctx context.Context, event, ticketID string) (sale.BookingRecord, error) {
	b, err := scanBooking(db.sql.QueryRowContext(ctx,
		db.rebind(`SELECT `+bookingColumns+` FROM bookings WHERE event_id = ? AND ticket_id = ?`), event, ticketID))
	if err != nil {
		return sale.BookingRecord{}, fmt.Errorf("sqlstore: BookingByTicket: %w", interpretError(err, bookingRows))
	}
	return b, nil
}

// CancelBooking cancels a confirmed booking in one transaction: its status, its seats freed,
// its units back for sale (giveBack). changed is false (and b the booking) when it was cancelled
// already. Errors: sale.ErrBookingNotFound, or a database error.
func (db *DB) CancelBooking(ctx context.Context, id string) (b sale.BookingRecord, changed bool, err error) {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CancelBooking: %w", err)
	}
	defer func() {
		if err != nil || !changed {
			_ = tx.Rollback()
		}
	}()
	b, err = scanBooking(tx.QueryRowContext(ctx, db.rebind(`SELECT `+bookingColumns+` FROM bookings WHERE id = ?`+db.forUpdate()), id))
	if err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CancelBooking: %w", interpretError(err, bookingRows))
	}
	if b.Status != sale.BookingConfirmed {
		return b, false, nil
	}
	now := normTime(time.Now())
	if _, err = tx.ExecContext(ctx, db.rebind(`UPDATE bookings SET status = ?, cancelled_at = ? WHERE id = ?`),
		sale.BookingCancelled, db.timeArg(now), id); err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CancelBooking: %w", err)
	}
	if _, err = tx.ExecContext(ctx, db.rebind(`DELETE FROM booking_seats WHERE booking_id = ?`), id); err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CancelBooking: seats: %w", err)
	}
	if err = db.giveBack(ctx, tx, b.Event, b.Quantity); err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CancelBooking: inventory: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return sale.BookingRecord{}, false, fmt.Errorf("sqlstore: CancelBooking: commit: %w", err)
	}
	b.Status, b.CancelledAt = sale.BookingCancelled, now
	return b, true, nil
}

// SoldBookings returns the confirmed bookings of an event (the sold state a store restores),
// ordered by id.
func (db *DB) SoldBookings(ctx context.Context, event string) ([]sale.BookingRecord, error) {
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT `+bookingColumns+` FROM bookings
		WHERE event_id = ? AND status = ? ORDER BY id`), event, sale.BookingConfirmed)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: SoldBookings: %w", err)
	}
	defer rows.Close()
	out := []sale.BookingRecord{}
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
		event, sale.BookingCancelled)
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

// Inventory returns an event's capacity and units sold (the sums of its inventory slots, read
// in one statement: one snapshot). Errors: sale.ErrNotForSale (no inventory), or the database's.
func (db *DB) Inventory(ctx context.Context, event string) (capacity, sold int64, err error) {
	var n int64
	err = db.sql.QueryRowContext(ctx, db.rebind(`SELECT COUNT(*), CAST(COALESCE(SUM(capacity), 0) AS BIGINT),
		CAST(COALESCE(SUM(sold), 0) AS BIGINT) FROM inventory_slots WHERE event_id = ?`), event).Scan(&n, &capacity, &sold)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlstore: Inventory: %w", err)
	}
	if n == 0 {
		return 0, 0, sale.ErrNotForSale
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

package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/event"
)

const eventColumns = `id, name, max_active, admit_rate, session_ttl_s, claim_ttl_s,
	opens_at, closes_at, redirect_url, version, created_at, updated_at,
	capacity, seats, seat_map, max_per_booking, hold_ttl_s, paused, pause_message,
	limits, identity_required, max_per_user, session_max_s, page, challenge, prequeue_order, draw_seed, auto`

type rowScanner interface{ Scan(dest ...any) error }

func scanEvent(row rowScanner) (event.Event, error) {
	var (
		e                event.Event
		sessTTL, claimTT int64
		redirect         sql.NullString
		capacity         sql.NullInt64
		seats, seatMap   sql.NullString
		holdTTL          int64
		pauseMessage     sql.NullString
		limits           sql.NullString
		sessionMax       int64
		page             sql.NullString
		challenge        sql.NullString
		drawSeed         sql.NullString
		auto             sql.NullString
	)
	err := row.Scan(&e.ID, &e.Name, &e.MaxActive, &e.AdmitRate, &sessTTL, &claimTT,
		timeCol{&e.OpensAt}, timeCol{&e.ClosesAt}, &redirect, &e.Version,
		timeCol{&e.CreatedAt}, timeCol{&e.UpdatedAt},
		&capacity, &seats, &seatMap, &e.MaxPerBooking, &holdTTL, &e.Paused, &pauseMessage,
		&limits, &e.IdentityRequired, &e.MaxPerUser, &sessionMax, &page, &challenge, &e.PrequeueOrder, &drawSeed, &auto)
	if err != nil {
		return event.Event{}, err
	}
	if drawSeed.Valid {
		if e.DrawSeed, err = draw.ParseSeed(drawSeed.String); err != nil {
			return event.Event{}, fmt.Errorf("draw_seed of %q: %w", e.ID, err)
		}
	}
	e.Capacity = capacity.Int64
	if seats.Valid && seats.String != "" {
		if err := json.Unmarshal([]byte(seats.String), &e.Seats); err != nil {
			return event.Event{}, fmt.Errorf("seats of %q: %w", e.ID, err)
		}
	}
	e.SeatMap = seatMap.String
	e.HoldTTL = time.Duration(holdTTL) * time.Second
	e.SessionTTL = time.Duration(sessTTL) * time.Second
	e.ClaimTTL = time.Duration(claimTT) * time.Second
	e.RedirectURL = redirect.String
	e.PauseMessage = pauseMessage.String
	e.SessionMax = time.Duration(sessionMax) * time.Second
	if limits.Valid && limits.String != "" {
		var l limitsColumn
		if err := json.Unmarshal([]byte(limits.String), &l); err != nil {
			return event.Event{}, fmt.Errorf("limits of %q: %w", e.ID, err)
		}
		e.Limits = l.limits()
	}
	e.Limits = e.Limits.WithDefaults() // events stored before the column: the defaults
	if page.Valid && page.String != "" {
		var p pageColumn
		if err := json.Unmarshal([]byte(page.String), &p); err != nil {
			return event.Event{}, fmt.Errorf("page of %q: %w", e.ID, err)
		}
		e.Page = p.page()
	}
	if auto.Valid && auto.String != "" {
		var c autoColumn
		if err := json.Unmarshal([]byte(auto.String), &c); err != nil {
			return event.Event{}, fmt.Errorf("auto of %q: %w", e.ID, err)
		}
		e.Auto = c.auto()
	}
	if challenge.Valid && challenge.String != "" {
		var c challengeColumn
		if err := json.Unmarshal([]byte(challenge.String), &c); err != nil {
			return event.Event{}, fmt.Errorf("challenge of %q: %w", e.ID, err)
		}
		e.Challenge = event.Challenge(c)
	}
	return e, nil
}

// autoColumn is the JSON of the auto column (NULL: admission mode fixed).
type autoColumn struct {
	TargetP95MS  int64   `json:"target_p95_ms"`
	ErrorBudget  float64 `json:"error_budget"`
	MinMaxActive int64   `json:"min_max_active"`
	MaxMaxActive int64   `json:"max_max_active"`
	MinAdmitRate float64 `json:"min_admit_rate"`
	MaxAdmitRate float64 `json:"max_admit_rate"`
	PinMaxActive int64   `json:"pin_max_active,omitempty"`
	Hold         bool    `json:"hold,omitempty"`
	Origin       string  `json:"origin,omitempty"`
	HealthURL    string  `json:"health_url,omitempty"`
}

func (c autoColumn) auto() event.Auto {
	return event.Auto{Enabled: true, TargetP95: time.Duration(c.TargetP95MS) * time.Millisecond, ErrorBudget: c.ErrorBudget,
		MinMaxActive: c.MinMaxActive, MaxMaxActive: c.MaxMaxActive, MinAdmitRate: c.MinAdmitRate, MaxAdmitRate: c.MaxAdmitRate,
		PinMaxActive: c.PinMaxActive, Hold: c.Hold, Origin: c.Origin, HealthURL: c.HealthURL}
}

// autoArg is the auto column's value of a: NULL in mode fixed.
func autoArg(a event.Auto) any {
	if !a.Enabled {
		return nil
	}
	b, _ := json.Marshal(autoColumn{TargetP95MS: a.TargetP95.Milliseconds(), ErrorBudget: a.ErrorBudget,
		MinMaxActive: a.MinMaxActive, MaxMaxActive: a.MaxMaxActive, MinAdmitRate: a.MinAdmitRate, MaxAdmitRate: a.MaxAdmitRate,
		PinMaxActive: a.PinMaxActive, Hold: a.Hold, Origin: a.Origin, HealthURL: a.HealthURL}) // numbers and strings cannot fail
	return string(b)
}

// challengeColumn is the JSON of the challenge column (NULL: none).
type challengeColumn struct {
	Type          string `json:"type"`
	Difficulty    int    `json:"difficulty,omitempty"`
	SiteverifyURL string `json:"siteverify_url,omitempty"`
	Secret        string `json:"secret,omitempty"`
}

// challengeArg is the challenge column's value of c: NULL for none.
func challengeArg(c event.Challenge) any {
	if c.Type == event.ChallengeNone {
		return nil
	}
	b, _ := json.Marshal(challengeColumn(c)) // strings and an int cannot fail
	return string(b)
}

// pageColumn is the JSON of the page column (the API's names).
type pageColumn struct {
	Title   string `json:"title,omitempty"`
	Message string `json:"message,omitempty"`
	LogoURL string `json:"logo_url,omitempty"`
	Colors  struct {
		Background string `json:"background,omitempty"`
		Text       string `json:"text,omitempty"`
		Accent     string `json:"accent,omitempty"`
	} `json:"colors"`
	Language string `json:"language,omitempty"`
	Unit     string `json:"unit,omitempty"`
	Template string `json:"template,omitempty"`
	CSS      string `json:"css,omitempty"`
}

func (c pageColumn) page() event.Page {
	return event.Page{Title: c.Title, Message: c.Message, LogoURL: c.LogoURL, Language: c.Language, Unit: c.Unit,
		Template: c.Template, CSS: c.CSS,
		Colors: event.PageColors{Background: c.Colors.Background, Text: c.Colors.Text, Accent: c.Colors.Accent}}
}

// pageArg is the page column's value: NULL for the plain page.
func pageArg(p event.Page) any {
	if p.IsZero() {
		return nil
	}
	c := pageColumn{Title: p.Title, Message: p.Message, LogoURL: p.LogoURL, Language: p.Language, Unit: p.Unit,
		Template: p.Template, CSS: p.CSS}
	c.Colors.Background, c.Colors.Text, c.Colors.Accent = p.Colors.Background, p.Colors.Text, p.Colors.Accent
	b, _ := json.Marshal(c) // strings only: cannot fail
	return string(b)
}

// limitsColumn is the JSON of the limits column (windows in whole seconds).
type limitsColumn struct {
	JoinsPerClient int64 `json:"joins_per_client"`
	JoinWindowS    int64 `json:"join_window_s"`
	// TicketsPerClient: absent in rows written before it existed (0: the default).
	TicketsPerClient int64 `json:"tickets_per_client,omitempty"`
	PushPerClient    int64 `json:"push_per_client"`
	PollsPerTicket   int64 `json:"polls_per_ticket"`
	PollWindowS      int64 `json:"poll_window_s"`
	// AddressesPerAdmission is absent (0: the default) in rows written before it existed.
	AddressesPerAdmission int64 `json:"addresses_per_admission,omitempty"`
}

func (l limitsColumn) limits() event.Limits {
	return event.Limits{JoinsPerClient: l.JoinsPerClient, JoinWindow: time.Duration(l.JoinWindowS) * time.Second,
		TicketsPerClient: l.TicketsPerClient, PushPerClient: l.PushPerClient, PollsPerTicket: l.PollsPerTicket, PollWindow: time.Duration(l.PollWindowS) * time.Second,
		AddressesPerAdmission: l.AddressesPerAdmission}
}

func limitsJSON(l event.Limits) string {
	b, _ := json.Marshal(limitsColumn{JoinsPerClient: l.JoinsPerClient, JoinWindowS: int64(l.JoinWindow / time.Second),
		TicketsPerClient: l.TicketsPerClient, PushPerClient: l.PushPerClient, PollsPerTicket: l.PollsPerTicket, PollWindowS: int64(l.PollWindow / time.Second),
		AddressesPerAdmission: l.AddressesPerAdmission})
	return string(b) // a struct of integers cannot fail
}

// nullString maps "" to NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// PutEvent inserts e, or updates the event with the same ID, in one transaction; created
// reports an insert. e is stored as e.WithDefaults() gives it (the caller validated it).
//
// Version is 1 on insert and one more than the stored one on update, counted in the
// transaction, so concurrent writers on any number of instances get distinct, ordered
// versions whatever their clocks. CreatedAt is kept on update; UpdatedAt is the writer's time
// (for people, never for ordering). stored is the record as GetEvent will return it.
//
// The draw's seed (event.Event.DrawSeed) is made here, once: an event written without one gets
// e.DrawSeed, or a fresh draw.NewSeed() when that is nil; one stored is never replaced.
//
// Errors: an empty ID, a NaN or infinite AdmitRate, *event.DropError, or a database error
// (including ctx's).
func (db *DB) PutEvent(ctx context.Context, e event.Event) (stored event.Event, created bool, err error) {
	return db.PutEventIf(ctx, e, 0)
}

// PutEventIf is PutEvent on a condition: with ifVersion > 0 it writes only over the stored
// version ifVersion (an HTTP If-Match), in the same transaction; otherwise *event.VersionError.
// With ifVersion event.CreateOnly it only creates (an HTTP If-None-Match: *): an event that exists
// is left as it is, and *event.VersionError names its version. With event.UpdateOnly it only
// changes an existing event, at any version (an HTTP If-Match: *): none answers event.ErrNotFound.
func (db *DB) PutEventIf(ctx context.Context, e event.Event, ifVersion int64) (stored event.Event, created bool, err error) {
	if e.ID == "" {
		return event.Event{}, false, errors.New("sqlstore: PutEvent: empty event ID")
	}
	if math.IsNaN(e.AdmitRate) || math.IsInf(e.AdmitRate, 0) {
		// PostgreSQL would store them, SQLite would not: refuse on both.
		return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: AdmitRate must be finite, got %v", e.ID, e.AdmitRate)
	}
	e = e.WithDefaults()
	now := normTime(time.Now())
	if e.DrawSeed == nil {
		e.DrawSeed = draw.NewSeed()
	}
	seedArg := hex.EncodeToString(e.DrawSeed)

	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()

	insert := db.rebind(`INSERT INTO events (` + eventColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`)
	update := db.rebind(`UPDATE events SET name = ?, max_active = ?, admit_rate = ?,
		session_ttl_s = ?, claim_ttl_s = ?, opens_at = ?, closes_at = ?, redirect_url = ?,
		updated_at = ?, capacity = ?, seats = ?, seat_map = ?, max_per_booking = ?, hold_ttl_s = ?,
		paused = ?, pause_message = ?,
		limits = ?, identity_required = ?, max_per_user = ?, session_max_s = ?, page = ?, challenge = ?,
		prequeue_order = ?, draw_seed = COALESCE(draw_seed, ?), auto = ?,
		version = version + 1
		WHERE id = ? AND (? = 0 OR version = ?)
		RETURNING version, created_at, draw_seed`)
	var seatsArg any
	if len(e.Seats) > 0 {
		b, err := json.Marshal(e.Seats)
		if err != nil {
			return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: seats: %w", e.ID, err)
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
		if ifVersion > 0 {
			// A conditional write updates an existing version or nothing.
			if err := db.checkVersion(ctx, tx, e.ID, ifVersion); err != nil {
				return event.Event{}, false, err
			}
		}
		if ifVersion != event.UpdateOnly { // UpdateOnly: an update of whatever version is stored, or nothing
			res, err := tx.ExecContext(ctx, insert,
				e.ID, e.Name, e.MaxActive, e.AdmitRate,
				int64(e.SessionTTL/time.Second), int64(e.ClaimTTL/time.Second),
				db.timeArg(e.OpensAt), db.timeArg(e.ClosesAt), nullString(e.RedirectURL),
				db.timeArg(now), db.timeArg(now),
				capacityArg, seatsArg, nullString(e.SeatMap), e.MaxPerBooking, int64(e.HoldTTL/time.Second),
				e.Paused, nullString(e.PauseMessage),
				limitsJSON(e.Limits), e.IdentityRequired, e.MaxPerUser, int64(e.SessionMax/time.Second), pageArg(e.Page),
				challengeArg(e.Challenge), e.PrequeueOrder, seedArg, autoArg(e.Auto))
			if err != nil {
				return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: insert: %w", e.ID, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: insert: %w", e.ID, err)
			}
			if n == 1 {
				created = true
				e.Version, e.CreatedAt, e.UpdatedAt = 1, now, now
				break
			}
			if ifVersion == event.CreateOnly {
				var cur int64
				if err := tx.QueryRowContext(ctx, db.rebind(`SELECT version FROM events WHERE id = ?`), e.ID).Scan(&cur); err != nil {
					return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, interpretError(err, eventRows))
				}
				return event.Event{}, false, &event.VersionError{Current: cur}
			}
		}
		cond := max(ifVersion, 0) // the version updated over (0: any, as for UpdateOnly)
		err = tx.QueryRowContext(ctx, update,
			e.Name, e.MaxActive, e.AdmitRate,
			int64(e.SessionTTL/time.Second), int64(e.ClaimTTL/time.Second),
			db.timeArg(e.OpensAt), db.timeArg(e.ClosesAt), nullString(e.RedirectURL),
			db.timeArg(now), capacityArg, seatsArg, nullString(e.SeatMap), e.MaxPerBooking, int64(e.HoldTTL/time.Second),
			e.Paused, nullString(e.PauseMessage),
			limitsJSON(e.Limits), e.IdentityRequired, e.MaxPerUser, int64(e.SessionMax/time.Second), pageArg(e.Page),
			challengeArg(e.Challenge), e.PrequeueOrder, seedArg, autoArg(e.Auto), e.ID, cond, cond,
		).Scan(&e.Version, timeCol{&e.CreatedAt}, &seedArg)
		if errors.Is(interpretError(err, eventRows), event.ErrNotFound) {
			if ifVersion == event.UpdateOnly {
				return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, event.ErrNotFound)
			}
			if attempt < 5 {
				continue
			}
		}
		if err != nil {
			return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: update: %w", e.ID, err)
		}
		e.UpdatedAt = now
		if e.DrawSeed, err = draw.ParseSeed(seedArg); err != nil {
			return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: draw_seed: %w", e.ID, err)
		}
		break
	}
	if err = db.keepsSoldSeats(ctx, tx, e); err != nil {
		return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, err)
	}
	if err = db.putInventory(ctx, tx, e.ID, e.Capacity); err != nil {
		return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: %w", e.ID, err)
	}
	if err = tx.Commit(); err != nil {
		return event.Event{}, false, fmt.Errorf("sqlstore: PutEvent %q: commit: %w", e.ID, err)
	}
	return e, created, nil
}

// GetEvent returns the event with the given ID. Errors: event.ErrNotFound, or the database's.
func (db *DB) GetEvent(ctx context.Context, id string) (event.Event, error) {
	row := db.sql.QueryRowContext(ctx, db.rebind(`SELECT `+eventColumns+` FROM events WHERE id = ?`), id)
	e, err := scanEvent(row)
	if err != nil {
		return event.Event{}, fmt.Errorf("sqlstore: GetEvent %q: %w", id, interpretError(err, eventRows))
	}
	return e, nil
}

// ListEvents returns all events ordered by ID (byte-wise); an empty, non-nil slice when there
// are none.
func (db *DB) ListEvents(ctx context.Context) ([]event.Event, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT `+eventColumns+` FROM events ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: ListEvents: %w", err)
	}
	defer rows.Close()
	events := []event.Event{}
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

// DeleteEvent deletes the event with the given ID, confirmed bookings included; deleted is
// false (and err nil) when there was none.
func (db *DB) DeleteEvent(ctx context.Context, id string) (deleted bool, err error) {
	return db.DeleteEventIf(ctx, id, 0, true)
}

// DeleteEventIf is DeleteEvent of the stored version ifVersion only (0: whatever version), in
// one transaction with its checks: *event.VersionError when another version is stored, or none
// (Current 0); and, unless dropSold, *event.DropError (Deleted) when the event has confirmed
// bookings, which its deletion would delete with it.
func (db *DB) DeleteEventIf(ctx context.Context, id string, ifVersion int64, dropSold bool) (deleted bool, err error) {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if ifVersion > 0 {
		if err := db.checkVersion(ctx, tx, id, ifVersion); err != nil {
			return false, err
		}
	}
	if !dropSold {
		// Under the event row's lock (PostgreSQL; checkVersion took it already), so that no
		// booking is confirmed between the count and the delete: a booking's INSERT takes the
		// row's share lock.
		if ifVersion <= 0 {
			var one int
			err := tx.QueryRowContext(ctx, db.rebind(`SELECT 1 FROM events WHERE id = ?`+db.forUpdate()), id).Scan(&one)
			if err != nil && !errors.Is(err, sql.ErrNoRows) { // none: nothing to keep, and nothing deleted
				return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
			}
		}
		var n, sold int64
		if err := tx.QueryRowContext(ctx, db.rebind(`SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM bookings
			WHERE event_id = ? AND status = 'CONFIRMED'`), id).Scan(&n, &sold); err != nil {
			return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
		}
		if n > 0 {
			return false, &event.DropError{Deleted: true, Bookings: n, Sold: sold}
		}
	}
	// The line record goes first: an event of the same id made later starts a new line under
	// a new generation, so its ticket ids never name the old line's tickets.
	if _, err := tx.ExecContext(ctx, db.rebind(`DELETE FROM line_numbers WHERE event_id = ?`), id); err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	// Its long history goes with it (rows a sampler writes after this are of a life no event
	// has, history.Bucket.Epoch, and are pruned with their age).
	if _, err := tx.ExecContext(ctx, db.rebind(`DELETE FROM event_history WHERE event_id = ?`), id); err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, db.rebind(`DELETE FROM events WHERE id = ?`), id)
	if err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("sqlstore: DeleteEvent %q: %w", id, err)
	}
	return n > 0, nil
}

// checkVersion returns *event.VersionError unless the event exists at version want (locking
// its row on PostgreSQL until the transaction ends).
func (db *DB) checkVersion(ctx context.Context, tx *sql.Tx, id string, want int64) error {
	var cur int64
	err := interpretError(tx.QueryRowContext(ctx, db.rebind(`SELECT version FROM events WHERE id = ?`+db.forUpdate()), id).Scan(&cur), eventRows)
	switch {
	case errors.Is(err, event.ErrNotFound):
		return &event.VersionError{}
	case err != nil:
		return err
	case cur != want:
		return &event.VersionError{Current: cur}
	}
	return nil
}

// keepsSoldSeats returns *event.DropError when e's seat list (or its lack of one) leaves out seats
// of confirmed bookings, or when e lists seats and units were sold without seats (an event of
// general admission that sold cannot become a seated one: its sold units would be no seat, and
// every seat would read free while the units are not).
func (db *DB) keepsSoldSeats(ctx context.Context, tx *sql.Tx, e event.Event) error {
	if len(e.Seats) > 0 {
		var unseated int64
		err := tx.QueryRowContext(ctx, db.rebind(`SELECT COALESCE(SUM(quantity), 0) FROM bookings
			WHERE event_id = ? AND status = 'CONFIRMED' AND seats = ''`), e.ID).Scan(&unseated)
		if err != nil {
			return err
		}
		if unseated > 0 {
			return &event.DropError{Sold: unseated, Capacity: e.Capacity, Unseated: true}
		}
	}
	rows, err := tx.QueryContext(ctx, db.rebind(`SELECT s.seat FROM booking_seats s
		JOIN bookings b ON b.id = s.booking_id AND b.status = 'CONFIRMED'
		WHERE s.event_id = ? ORDER BY s.seat`), e.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	keep := make(map[string]bool, len(e.Seats))
	for _, s := range e.Seats {
		keep[s] = true
	}
	var (
		dropped []string
		sold    int64
	)
	for rows.Next() {
		var seat string
		if err := rows.Scan(&seat); err != nil {
			return err
		}
		sold++
		if !keep[seat] {
			dropped = append(dropped, seat)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(dropped) > 0 {
		return &event.DropError{Sold: sold, Capacity: e.Capacity, Seats: dropped, General: len(e.Seats) == 0}
	}
	return nil
}

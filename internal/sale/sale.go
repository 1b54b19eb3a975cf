// Package sale holds the domain of the sale that follows the line: an event's inventory
// (general-admission units or named seats), holds that reserve units for an admitted ticket
// for a few minutes, and the sold state that bookings confirmed in the database leave in the
// store. It defines the Store interface every backend implements (memstore, redisstore), the
// bookings as the database records them (BookingRecord, returned by package sqlstore), and the
// sentinel errors of both, which the HTTP layer maps to problem codes.
//
// The database is the final arbiter of a sale (see package booking): the store only makes the
// common case fast and fair (atomic all-or-nothing holds, one live hold per ticket) and is
// rebuilt from the database when it lost data (Restore).
package sale

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/queue"
)

// Sentinel errors returned by Store implementations (wrapped with %w, or as the typed errors
// below that match them with errors.Is).
var (
	// ErrNoInventory: the store has no inventory for the event (not for sale, or the store lost
	// it: the caller puts it again and restores the sold state from the database).
	ErrNoInventory = errors.New("event has no inventory")
	// ErrNotReady: the inventory was (re)created and waits for its sold state from the database.
	ErrNotReady = errors.New("inventory is being restored")
	// ErrNotAdmitted: the ticket holds no live admitted session.
	ErrNotAdmitted = queue.ErrNotAdmitted
	// ErrSoldOut: every unit is sold.
	ErrSoldOut = queue.ErrSoldOut
	// ErrHoldConflict is matched by *ConflictError.
	ErrHoldConflict = errors.New("held or sold by someone else")
	// ErrInvalidHold is matched by *InvalidError (unknown seats, too many, empty request).
	ErrInvalidHold = errors.New("invalid hold request")
	// ErrHoldNotFound: no such live hold (unknown, released, booked, or expired and swept).
	ErrHoldNotFound = errors.New("hold not found")
	// ErrHoldExpired: the hold's time is up, or a seat of it went to someone else.
	ErrHoldExpired = errors.New("hold expired")
	// ErrHoldNotYours: the hold belongs to another ticket.
	ErrHoldNotYours = errors.New("hold belongs to another ticket")
)

// ConflictError is a hold refused because part of it is taken. It matches ErrHoldConflict.
type ConflictError struct {
	// Seats are the requested seats held or sold by someone else (seated events).
	Seats []string
	// Available is how many units could be held right now (general admission).
	Available int64
}

func (e *ConflictError) Error() string {
	if len(e.Seats) > 0 {
		return "seats " + strings.Join(e.Seats, ", ") + " are held or sold by someone else"
	}
	if e.Available == 1 {
		return "only 1 unit is available"
	}
	return fmt.Sprintf("only %d units are available", e.Available)
}

// Is makes errors.Is(err, ErrHoldConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrHoldConflict }

// InvalidError is a hold request the inventory cannot take. It matches ErrInvalidHold.
type InvalidError struct {
	Reason string
	Seats  []string // unknown seats, if that is the reason
}

func (e *InvalidError) Error() string {
	if len(e.Seats) > 0 {
		return e.Reason + ": " + strings.Join(e.Seats, ", ")
	}
	return e.Reason
}

// Is makes errors.Is(err, ErrInvalidHold) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalidHold }

// Inventory is what an event sells: the part of an event.Event the sale store enforces, made
// by event.Event.Inventory from a validated configuration (the ranges and defaults live there).
type Inventory struct {
	Event string
	// Capacity is the number of units for sale (the number of seats for a seated event).
	Capacity int64
	// Seats names the seats; nil sells general-admission units.
	Seats []string
	// MaxPerBooking caps one hold.
	MaxPerBooking int64
	// HoldTTL is how long a hold lasts.
	HoldTTL time.Duration
	// Version is the event configuration's version (event.Event.Version, a counter kept in
	// SQL) and Epoch names one life of the event (it changes when the event is deleted and
	// created again). A store ignores an inventory of its current Epoch whose Version is below
	// the one it holds, so a writer with an older copy (another instance's cache, a sync that
	// read it before a PUT) never reverts a newer configuration. 0 and "" are a version and an
	// epoch like any other.
	Version int64
	Epoch   string
}

// SeatRule is the pattern of seat names, for messages.
const SeatRule = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,15}$"

var seatPattern = regexp.MustCompile(SeatRule)

// ValidSeat reports whether s is a well-formed seat name: 1-16 of [A-Za-z0-9_.-], starting
// with a letter or digit.
func ValidSeat(s string) bool { return seatPattern.MatchString(s) }

// Signature identifies the inventory's configuration: a store keeps it and skips the seat
// list when an unchanged inventory is put again (the registry re-puts every second). It is
// the FNV-1a 64 hash of "capacity|max_per_booking|hold_ttl_ms|" and each seat followed by
// ",", as 16 lower-case hex characters; the event is not part of it.
func (inv Inventory) Signature() string {
	b := fmt.Appendf(nil, "%d|%d|%d|", inv.Capacity, inv.MaxPerBooking, inv.HoldTTL.Milliseconds())
	for _, s := range inv.Seats {
		b = append(append(b, s...), ',')
	}
	h := fnv.New64a()
	h.Write(b) // never fails
	return fmt.Sprintf("%016x", h.Sum64())
}

// SeatsOrQuantity is the reason a hold naming both seats and a quantity is refused (Normalize,
// and the API, which also refuses both members given when one is empty or 0).
const SeatsOrQuantity = "give seats or quantity, not both"

// HoldParams is the input of Store.Hold: either Seats or Quantity.
type HoldParams struct {
	Ticket queue.TicketRef
	// HoldID names the new hold (chosen by the caller, random, unique).
	HoldID   string
	Seats    []string
	Quantity int64
}

// Normalize checks the request's shape (one of seats or quantity, no duplicate seat) and
// returns it with the seats sorted. Errors: *InvalidError.
func (p HoldParams) Normalize() (HoldParams, error) {
	switch {
	case len(p.Seats) > 0 && p.Quantity != 0:
		return p, &InvalidError{Reason: SeatsOrQuantity}
	case len(p.Seats) == 0 && p.Quantity < 1:
		return p, &InvalidError{Reason: "give seats, or a quantity of at least 1"}
	case p.HoldID == "" || strings.ContainsAny(p.HoldID, "|,:"):
		return p, &InvalidError{Reason: "invalid hold id"}
	}
	if len(p.Seats) > 0 {
		p.Seats = slices.Clone(p.Seats)
		slices.Sort(p.Seats)
		var bad []string
		for i, s := range p.Seats {
			if !ValidSeat(s) {
				bad = append(bad, s)
			}
			if i > 0 && p.Seats[i-1] == s {
				// Not an unknown seat (Seats is unknown_seats in the answer): named in the reason.
				return p, &InvalidError{Reason: "seat " + strconv.Quote(s) + " is listed twice"}
			}
		}
		if len(bad) > 0 {
			return p, &InvalidError{Reason: "unknown seats", Seats: bad}
		}
		p.Quantity = int64(len(p.Seats))
	}
	return p, nil
}

// Hold is a live reservation of units for one ticket.
type Hold struct {
	ID       string
	Ticket   queue.TicketRef
	Seats    []string // sorted; nil for general admission
	Quantity int64
	// ExpiresAt is when the hold frees its units by itself.
	ExpiresAt time.Time
	// Epoch is the life of the event the hold was made in (Inventory.Epoch), as BeginBooking
	// reads it: the database refuses a booking of another life (the event deleted and created
	// again while the booking was on its way).
	Epoch string
}

// Booking is a confirmed sale as the store records it (the database's booking, reduced).
type Booking struct {
	ID       string
	Quantity int64
	Seats    []string // nil for general admission
}

// CommitParams is the input of Store.CommitBooking.
type CommitParams struct {
	Ticket  queue.TicketRef
	HoldID  string
	Booking Booking
}

// Counts are an inventory's counters after a step.
type Counts struct {
	Capacity, Sold, Held int64
	// SoldOut is true when every unit is sold (the line is then marked sold out).
	SoldOut bool
	// Passed counts the waiting tickets passed over by a sell-out made by this step.
	Passed int64
}

// Available is the number of units neither sold nor held.
func (c Counts) Available() int64 { return max(0, c.Capacity-c.Sold-c.Held) }

// SeatState is a seat's state as GET /seats shows it.
type SeatState string

// Seat states.
const (
	SeatAvailable SeatState = "available"
	SeatHeld      SeatState = "held"
	SeatSold      SeatState = "sold"
)

// Availability is an inventory's state in one read.
type Availability struct {
	Counts
	// Taken maps each seat that is not available to its state (seated events only).
	Taken map[string]SeatState
	// Seated is true for an inventory of named seats.
	Seated bool
	Now    time.Time
}

// PutResult reports Store.PutInventory.
type PutResult struct {
	// Created is true when the inventory did not exist: it refuses holds (ErrNotReady) until
	// Restore gives it the database's sold state.
	Created bool
	// Changed is true when the configuration was written (created or different).
	Changed bool
	// Ready is false while the inventory waits for Restore.
	Ready bool
	// Sold is the units sold as the store counts them; the sale sync compares it with the
	// database's count to find drift.
	Sold int64
}

// Store keeps the inventories, holds and sold state of all events. Every method is one atomic
// step on the shared state, which includes the line of queue.Store (admitted sessions, the
// sold-out flag): a backend implements both on the same data.
type Store interface {
	// PutInventory creates or updates an event's inventory. A new inventory is not ready (see
	// PutResult). Changing the seats of an existing inventory keeps the sold and held seats
	// that remain, and drops the holds it no longer sells: one on a seat taken off the list, or
	// one of the other kind (seats when the event now sells a quantity, or the reverse).
	// Errors: a validation error.
	PutInventory(ctx context.Context, inv Inventory) (PutResult, error)
	// DeleteInventory removes the event's inventory, holds and sold state.
	DeleteInventory(ctx context.Context, event string) error
	// Restore rebuilds the sold state from the database: the recorded bookings become sold
	// (the database's confirmed ones) plus those recorded already that cancelled does not name
	// (confirmed after the caller's read: a stale read never makes a sold seat available).
	// Holds on sold seats are dropped, the sold counter is recomputed, the line's sold-out flag
	// follows (selling out passes over the line), and the inventory becomes ready.
	// Errors: ErrNoInventory.
	Restore(ctx context.Context, event string, sold []Booking, cancelled []string) (Counts, error)
	// Hold reserves the seats or quantity for the ticket, all or nothing, and replaces the
	// ticket's previous hold in the same step (on failure the previous hold stays). The ticket
	// must hold a live admitted session (which the hold extends, as activity).
	// Errors: ErrNoInventory, ErrNotReady, ErrNotAdmitted, queue.ErrTicketNotFound,
	// ErrSoldOut, *InvalidError, *ConflictError.
	Hold(ctx context.Context, p HoldParams) (Hold, error)
	// Release frees a hold of the ticket at once.
	// Errors: ErrNoInventory, ErrHoldNotFound, ErrHoldNotYours.
	Release(ctx context.Context, ticket queue.TicketRef, holdID string) error
	// BeginBooking checks that the hold is the ticket's, unexpired and intact and that the
	// session is live, and keeps the hold for at least grace more (the database write runs
	// meanwhile). Errors: ErrNoInventory, ErrNotReady, ErrHoldNotFound, ErrHoldNotYours,
	// ErrHoldExpired, ErrNotAdmitted.
	BeginBooking(ctx context.Context, ticket queue.TicketRef, holdID string, grace time.Duration) (Hold, error)
	// EndBooking ends a booking attempt the database refused, nothing written (the buyer past
	// max_per_user, say): the hold's booking grace ends, and the hold is back under its own
	// time and its session's rules. It is dropped at once when the session is no longer live
	// (the ticket left meanwhile, which only the grace kept it past) or its time before the
	// first attempt is up; otherwise it keeps that time. Errors: ErrNoInventory,
	// ErrHoldNotFound, ErrHoldNotYours.
	EndBooking(ctx context.Context, ticket queue.TicketRef, holdID string) error
	// CommitBooking records a booking the database confirmed: its seats are sold, the sold
	// counter grows, the hold is gone, the ticket's session ends as COMPLETED, and selling
	// the last unit marks the event sold out. Committing a booking already recorded changes
	// nothing (retries are safe). Errors: ErrNoInventory.
	CommitBooking(ctx context.Context, p CommitParams) (Counts, error)
	// CancelBooking returns a cancelled booking's units and reopens the sale (the line's
	// sold-out flag is cleared). Cancelling an unrecorded booking changes nothing.
	// Errors: ErrNoInventory.
	CancelBooking(ctx context.Context, event string, b Booking) (Counts, error)
	// Availability reads the inventory's state. Errors: ErrNoInventory.
	Availability(ctx context.Context, event string) (Availability, error)
	// Counts reads the inventory's counters and changes nothing: unlike Availability it sweeps
	// no expired hold (Held counts holds not swept yet) and lists no seat, so that a reader
	// polling it (the console's sampler, metrics) neither costs what the seat list costs nor
	// changes what a booking on an expired hold answers. Counts.Passed is 0.
	// Errors: ErrNoInventory, ErrNotReady.
	Counts(ctx context.Context, event string) (Counts, error)
}

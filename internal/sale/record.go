package sale

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Statuses of a BookingRecord.
const (
	BookingConfirmed = "CONFIRMED"
	BookingCancelled = "CANCELLED"
)

// BookingRecord is a sale as the database records it, the final arbiter (package sqlstore):
// its schema makes a double sale impossible (one row per sold seat and event, units sold never
// above capacity, one booking per ticket). Booking is what the store keeps of it (Sold).
type BookingRecord struct {
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
	// Epoch, when set, is the life of the event the booking's hold was made in (sale.Hold's):
	// CreateBooking refuses it (event.ErrNotFound) when the event in the database is of
	// another life. It is checked, not stored.
	Epoch  string
	Status string // BookingConfirmed or BookingCancelled
	// CreatedAt and CancelledAt are set by the database's writer (UTC, ms); CancelledAt is
	// zero unless cancelled.
	CreatedAt, CancelledAt time.Time
}

// Sold is the booking as a Store records it (CommitBooking, CancelBooking, Restore).
func (b BookingRecord) Sold() Booking {
	return Booking{ID: b.ID, Quantity: b.Quantity, Seats: b.Seats}
}

// Errors of the bookings in the database.
var (
	// ErrBookingNotFound: no booking of that id (or of that ticket).
	ErrBookingNotFound = errors.New("booking not found")
	// ErrNotForSale: the event has no capacity (no inventory in the database).
	ErrNotForSale = errors.New("event not for sale")
	// ErrNotEnoughUnits: the booking would sell more than the capacity.
	ErrNotEnoughUnits = errors.New("not enough units left")
	// ErrSeatsTaken is matched by *SeatsTakenError.
	ErrSeatsTaken = errors.New("seats already sold")
	// ErrPurchaseLimit is matched by *PurchaseLimitError.
	ErrPurchaseLimit = errors.New("purchase limit reached")
)

// SeatsTakenError names the seats of a booking that another booking sold already. It matches
// ErrSeatsTaken.
type SeatsTakenError struct{ Seats []string }

func (e *SeatsTakenError) Error() string { return "seats already sold: " + strings.Join(e.Seats, ", ") }

// Is makes errors.Is(err, ErrSeatsTaken) hold.
func (e *SeatsTakenError) Is(target error) bool { return target == ErrSeatsTaken }

// PurchaseLimitError refuses a booking that would take a user past the event's max_per_user:
// Remaining is how many units the user may still buy (0..Max). It matches ErrPurchaseLimit.
type PurchaseLimitError struct{ Max, Remaining int64 }

func (e *PurchaseLimitError) Error() string {
	return fmt.Sprintf("at most %d units per user; %d remain", e.Max, e.Remaining)
}

// Is makes errors.Is(err, ErrPurchaseLimit) hold.
func (e *PurchaseLimitError) Is(target error) bool { return target == ErrPurchaseLimit }

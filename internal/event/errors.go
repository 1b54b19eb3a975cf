package event

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of the stored configurations (package sqlstore returns them; registry passes them on).
var (
	// ErrNotFound: no event of that id is stored.
	ErrNotFound = errors.New("event not found")
	// ErrWouldDropSold is matched by *DropError.
	ErrWouldDropSold = errors.New("the configuration would drop what was sold")
	// ErrVersionMismatch is matched by *VersionError.
	ErrVersionMismatch = errors.New("the event's version is not the one expected")
)

// DropError is a configuration refused because it would drop what the event has sold: a
// capacity below the units sold (or none at all), or sold seats missing from the new seat
// list. It matches ErrWouldDropSold.
type DropError struct {
	Sold     int64    // units sold
	Capacity int64    // the capacity asked for (0: none)
	Seats    []string // sold seats the new seat list leaves out, sorted
	// General: the new configuration has no seat list (general admission), so every sold seat
	// is left out, however large its capacity.
	General bool
	// Unseated: the new configuration lists seats, and Sold units were sold without seats
	// (general admission).
	Unseated bool
	// Deleted: the event's deletion, which would delete its Bookings confirmed bookings of
	// Sold units with it, asked without dropping them (DELETE without drop_sold).
	Deleted  bool
	Bookings int64
}

func (e *DropError) Error() string {
	if e.Deleted {
		return fmt.Sprintf("deleting the event deletes its %d confirmed bookings (%d units sold) with it", e.Bookings, e.Sold)
	}
	if e.Unseated {
		return fmt.Sprintf("a seat list would leave out the %d units sold without seats: an event that sold a quantity keeps selling one", e.Sold)
	}
	if e.General && len(e.Seats) > 0 {
		return fmt.Sprintf("general admission would drop the %d sold seats (%s): a seated event that sold seats keeps a seat list", len(e.Seats), strings.Join(e.Seats, ", "))
	}
	if len(e.Seats) > 0 {
		return fmt.Sprintf("the seat list leaves out %d sold seats (%s)", len(e.Seats), strings.Join(e.Seats, ", "))
	}
	return fmt.Sprintf("capacity %d is below the %d units sold", e.Capacity, e.Sold)
}

// Is makes errors.Is(err, ErrWouldDropSold) hold.
func (e *DropError) Is(target error) bool { return target == ErrWouldDropSold }

// VersionError is a conditional write (an HTTP If-Match) refused because the stored version is
// not the expected one (Current is 0 when the event does not exist). It matches
// ErrVersionMismatch.
type VersionError struct{ Current int64 }

func (e *VersionError) Error() string {
	return fmt.Sprintf("the event is at version %d", e.Current)
}

// Is makes errors.Is(err, ErrVersionMismatch) hold.
func (e *VersionError) Is(target error) bool { return target == ErrVersionMismatch }

// CreateOnly is the version condition of a write that only creates the event (HTTP
// If-None-Match: *): an event that exists answers *VersionError with its version.
const CreateOnly int64 = -1

// UpdateOnly is the version condition of a write that only changes an existing event, at any
// version (HTTP If-Match: *, RFC 9110 13.1.1): no such event answers ErrNotFound.
const UpdateOnly int64 = -2

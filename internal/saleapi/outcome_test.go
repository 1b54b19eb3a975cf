package saleapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/sale"
)

// TestBookingOutcome: waitroom_bookings_total counts a client's refusals (every 4xx of the
// sale's problems) apart from what the service could not do ("error", which alerts watch).
func TestBookingOutcome(t *testing.T) {
	for err, want := range map[error]string{
		&sale.ConflictError{Seats: []string{"A-1"}}: "conflict",
		sale.ErrSoldOut:                                        "sold_out",
		&sale.PurchaseLimitError{Max: 1}:                       "refused",
		&sale.InvalidError{Reason: "too many"}:                 "refused",
		sale.ErrNotForSale:                                     "refused",
		sale.ErrHoldExpired:                                    "refused",
		&booking.AlreadyBookedError{BookingID: "bk"}:           "refused",
		fmt.Errorf("book: %w", booking.ErrIdempotencyMismatch): "refused",
		fmt.Errorf("sqlstore: CreateBooking: event e was created again: %w", event.ErrNotFound): "refused",
		sale.ErrNotReady: "error",
		errors.New("dial tcp: connection refused"): "error",
	} {
		require.Equal(t, want, bookingOutcome(err), "%v", err)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

// SaleFactory returns a fresh line store and the sale store on the same data, whose clock is
// now (nil: the store's own clock). It registers its own cleanup with t.
type SaleFactory func(t *testing.T, now func() time.Time) (queue.Store, sale.Store)

var holdSeq atomic.Int64

func newHoldID() string { return fmt.Sprintf("h%d", holdSeq.Add(1)) }

// seatNames returns n seats "S-01".."S-n".
func seatNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("S-%02d", i+1)
	}
	return out
}

// newSale creates an event (max_active 1000, admitting at once) with a ready inventory.
func newSale(t *testing.T, q queue.Store, s sale.Store, inv sale.Inventory, mod func(*queue.EventConfig)) queue.EventConfig {
	t.Helper()
	cfg := newEvent(t, q, func(c *queue.EventConfig) {
		c.MaxActive = 1000
		if mod != nil {
			mod(c)
		}
	})
	inv = inventory(cfg, inv)
	ctx := context.Background()
	r, err := s.PutInventory(ctx, inv)
	require.NoError(t, err)
	require.True(t, r.Created)
	_, err = s.Restore(ctx, cfg.ID, nil, nil)
	require.NoError(t, err)
	return cfg
}

// inventory is inv for the event of cfg with the defaults an event gets (event.Event).
func inventory(cfg queue.EventConfig, inv sale.Inventory) sale.Inventory {
	out := event.Event{ID: cfg.ID, MaxActive: cfg.MaxActive, Capacity: inv.Capacity, Seats: inv.Seats,
		MaxPerBooking: inv.MaxPerBooking, HoldTTL: inv.HoldTTL}.WithDefaults().Inventory()
	out.Version, out.Epoch = inv.Version, inv.Epoch
	return out
}

func hold(t *testing.T, s sale.Store, tk queue.Ticket, qty int64, seats ...string) (sale.Hold, error) {
	t.Helper()
	return s.Hold(context.Background(), sale.HoldParams{Ticket: tk.TicketRef, HoldID: newHoldID(), Seats: seats, Quantity: qty})
}

func mustHold(t *testing.T, s sale.Store, tk queue.Ticket, qty int64, seats ...string) sale.Hold {
	t.Helper()
	h, err := hold(t, s, tk, qty, seats...)
	require.NoError(t, err)
	return h
}

func taken(t *testing.T, s sale.Store, event string) map[string]sale.SeatState {
	t.Helper()
	a, err := s.Availability(context.Background(), event)
	require.NoError(t, err)
	return a.Taken
}

// book runs the store's part of a booking (the database's part is package booking's).
func book(t *testing.T, s sale.Store, tk queue.Ticket, h sale.Hold, id string) sale.Counts {
	t.Helper()
	ctx := context.Background()
	b, err := s.BeginBooking(ctx, tk.TicketRef, h.ID, 30*time.Second)
	require.NoError(t, err)
	c, err := s.CommitBooking(ctx, sale.CommitParams{Ticket: tk.TicketRef, HoldID: h.ID,
		Booking: sale.Booking{ID: id, Quantity: b.Quantity, Seats: b.Seats}})
	require.NoError(t, err)
	return c
}

// RunSale runs the sale conformance suite against the stores newStores makes: each test below
// as a parallel subtest on stores of its own.
func RunSale(t *testing.T, newStores SaleFactory) {
	runSuite(t, newStores, []suiteTest[SaleFactory]{
		{"InventoryLifecycle", testInventoryLifecycle},
		{"SeatHoldsAreAllOrNothing", testSeatHoldsAreAllOrNothing},
		{"HoldsNeedALiveAdmission", testHoldsNeedALiveAdmission},
		{"GeneralAdmissionCountsUnits", testGeneralAdmissionCountsUnits},
		{"HoldsExpireAndReleaseBelongToTheHolder", testHoldsExpireAndReleaseBelongToTheHolder},
		{"BookingSellsOutAndCancelReopens", testBookingSellsOutAndCancelReopens},
		{"RestoreReplacesTheSoldState", testRestoreReplacesTheSoldState},
		{"ConcurrentOverlappingHolds", testConcurrentOverlappingHolds},
		{"PutInventoryReportsSold", testPutInventoryReportsSold},
		{"CapacityChangeMovesTheSoldOut", testCapacityChangeMovesTheSoldOut},
		{"OlderInventoryNeverReverts", testOlderInventoryNeverReverts},
		{"ChangedInventoryDropsHoldsItNoLongerSells", testChangedInventoryDropsHoldsItNoLongerSells},
		{"LeavingReleasesTheHold", testLeavingReleasesTheHold},
		{"EndedSessionReleasesTheHold", testEndedSessionReleasesTheHold},
		{"BookingGraceOutlivesTheSession", testBookingGraceOutlivesTheSession},
		{"ReleaseDuringBookingKeepsTheUnits", testReleaseDuringBookingKeepsTheUnits},
		{"BookingReleasesAHoldMadeMeanwhile", testBookingReleasesAHoldMadeMeanwhile},
		{"FailedBookingsDoNotKeepTheHold", testFailedBookingsDoNotKeepTheHold},
		{"RefusedBookingEndsItsGrace", testRefusedBookingEndsItsGrace},
	})
}

// testInventoryLifecycle: an inventory is not ready until restored from the database; an unchanged
// one is not written again; a changed one keeps its holds and readiness; it can be deleted.
func testInventoryLifecycle(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newEvent(t, q, nil)
	_, err := s.Availability(ctx, cfg.ID)
	require.ErrorIs(t, err, sale.ErrNoInventory)
	_, err = s.Counts(ctx, cfg.ID)
	require.ErrorIs(t, err, sale.ErrNoInventory)
	tk := join(t, q, cfg.ID, "")
	_, err = hold(t, s, tk, 1)
	require.ErrorIs(t, err, sale.ErrNoInventory)

	inv := inventory(cfg, sale.Inventory{Seats: seatNames(3)})
	r, err := s.PutInventory(ctx, inv)
	require.NoError(t, err)
	require.Equal(t, sale.PutResult{Created: true, Changed: true}, r)
	_, err = hold(t, s, tk, 0, "S-01")
	require.ErrorIs(t, err, sale.ErrNotReady, "a new inventory waits for the database's sold state")
	_, err = s.Availability(ctx, cfg.ID)
	require.ErrorIs(t, err, sale.ErrNotReady)
	_, err = s.Counts(ctx, cfg.ID)
	require.ErrorIs(t, err, sale.ErrNotReady)
	c, err := s.Restore(ctx, cfg.ID, nil, nil)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 3}, c)
	r, err = s.PutInventory(ctx, inv)
	require.NoError(t, err)
	require.Equal(t, sale.PutResult{Ready: true}, r, "an unchanged inventory is not written again")
	mustHold(t, s, tk, 0, "S-02")

	// A changed inventory keeps its holds and readiness.
	inv = inventory(cfg, sale.Inventory{Seats: seatNames(5)})
	r, err = s.PutInventory(ctx, inv)
	require.NoError(t, err)
	require.Equal(t, sale.PutResult{Changed: true, Ready: true}, r)
	a, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(5), a.Capacity)
	require.Equal(t, int64(1), a.Held)
	require.Equal(t, map[string]sale.SeatState{"S-02": sale.SeatHeld}, a.Taken)
	require.True(t, a.Seated)
	cn, err := s.Counts(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, a.Counts, cn, "Counts reads what Availability counts")

	require.NoError(t, s.DeleteInventory(ctx, cfg.ID))
	_, err = s.Availability(ctx, cfg.ID)
	require.ErrorIs(t, err, sale.ErrNoInventory)
}

// testSeatHoldsAreAllOrNothing: a seat hold takes all its seats or none, replaces the ticket's
// previous hold in one step, and invalid requests are refused.
func testSeatHoldsAreAllOrNothing(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(6)}, nil)
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	ha := mustHold(t, s, a, 0, "S-02", "S-01")
	require.Equal(t, []string{"S-01", "S-02"}, ha.Seats)
	require.Equal(t, int64(2), ha.Quantity)
	require.Equal(t, clock.Now().Add(event.DefaultHoldTTL), ha.ExpiresAt)

	_, err := hold(t, s, b, 0, "S-02", "S-03")
	var ce *sale.ConflictError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, sale.ErrHoldConflict)
	require.Equal(t, []string{"S-02"}, ce.Seats)
	require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatHeld, "S-02": sale.SeatHeld}, taken(t, s, cfg.ID),
		"a refused hold takes nothing")
	mustHold(t, s, b, 0, "S-03")

	// A new hold replaces the ticket's previous one in one step (overlap with it allowed).
	mustHold(t, s, a, 0, "S-02", "S-04")
	require.Equal(t, map[string]sale.SeatState{"S-02": sale.SeatHeld, "S-03": sale.SeatHeld, "S-04": sale.SeatHeld},
		taken(t, s, cfg.ID))
	// A refused replacement keeps the previous hold.
	_, err = hold(t, s, a, 0, "S-03", "S-05")
	require.ErrorAs(t, err, &ce)
	require.Equal(t, []string{"S-03"}, ce.Seats)
	require.Len(t, taken(t, s, cfg.ID), 3)

	var ie *sale.InvalidError
	_, err = hold(t, s, a, 0, "S-01", "Z-99", "Q-1")
	require.ErrorAs(t, err, &ie)
	require.ErrorIs(t, err, sale.ErrInvalidHold)
	require.Equal(t, []string{"Q-1", "Z-99"}, ie.Seats)
	_, err = hold(t, s, a, 0, "S-01", "S-05", "S-06", "S-02", "S-04")
	require.ErrorIs(t, err, sale.ErrInvalidHold, "more than max_per_booking")
	_, err = hold(t, s, a, 2)
	require.ErrorIs(t, err, sale.ErrInvalidHold, "a quantity on a seated event")
	_, err = hold(t, s, a, 0, "S-01", "S-01")
	require.ErrorIs(t, err, sale.ErrInvalidHold, "a seat twice")
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 6, Held: 3}, av.Counts)
}

// testHoldsNeedALiveAdmission: only a ticket with a live admitted session holds; a hold counts as
// activity.
func testHoldsNeedALiveAdmission(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Capacity: 10}, func(c *queue.EventConfig) {
		c.MaxActive = 1
		c.SessionTTL = 60 * time.Second
	})
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	require.Equal(t, queue.StatusQueued, b.Status)
	_, err := hold(t, s, b, 1)
	require.ErrorIs(t, err, sale.ErrNotAdmitted, "a waiting ticket")
	_, err = hold(t, s, queue.Ticket{TicketRef: queue.TicketRef{Event: cfg.ID, Generation: 99, Number: 1}}, 1)
	require.ErrorIs(t, err, queue.ErrTicketNotFound)
	clock.Advance(50 * time.Second)
	mustHold(t, s, a, 1) // activity: the session now lasts until 110 s
	clock.Advance(50 * time.Second)
	st := status(t, q, a)
	require.Equal(t, queue.StatusAdmitted, st.Status, "a hold extends the session")
	clock.Advance(60 * time.Second)
	_, err = hold(t, s, a, 1)
	require.ErrorIs(t, err, sale.ErrNotAdmitted, "an idle session ended")
	require.NoError(t, q.Leave(ctx, b.TicketRef))
	c := join(t, q, cfg.ID, "")
	require.Equal(t, int64(1), admit(t, q, cfg.ID, 0).Admitted)
	c = status(t, q, c)
	require.Equal(t, queue.StatusAdmitted, c.Status)
	mustHold(t, s, c, 1)
	require.NoError(t, q.Leave(ctx, c.TicketRef))
	_, err = hold(t, s, c, 1)
	require.ErrorIs(t, err, sale.ErrNotAdmitted, "a ticket that left")
}

// testGeneralAdmissionCountsUnits: a general-admission hold takes units; a refused one says how
// many are available.
func testGeneralAdmissionCountsUnits(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Capacity: 5}, nil)
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	ha := mustHold(t, s, a, 3)
	require.Nil(t, ha.Seats)
	_, err := hold(t, s, b, 3)
	var ce *sale.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, int64(2), ce.Available)
	require.Empty(t, ce.Seats)
	mustHold(t, s, b, 2)
	mustHold(t, s, a, 3) // its own hold counts as available to it
	_, err = hold(t, s, a, 4)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, int64(3), ce.Available)
	_, err = hold(t, s, a, 0, "S-01")
	require.ErrorIs(t, err, sale.ErrInvalidHold, "seats on a general-admission event")
	hb, err := s.BeginBooking(ctx, b.TicketRef, "nope", time.Second)
	require.ErrorIs(t, err, sale.ErrHoldNotFound)
	require.Empty(t, hb.ID)
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 5, Held: 5}, av.Counts)
	require.False(t, av.Seated)
}

// testHoldsExpireAndReleaseBelongToTheHolder: holds expire after hold_ttl by themselves; only their
// ticket releases or books them.
func testHoldsExpireAndReleaseBelongToTheHolder(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(4), HoldTTL: 10 * time.Second}, nil)
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	ha := mustHold(t, s, a, 0, "S-01", "S-02")
	require.ErrorIs(t, s.Release(ctx, b.TicketRef, ha.ID), sale.ErrHoldNotYours)
	_, err := s.BeginBooking(ctx, b.TicketRef, ha.ID, time.Second)
	require.ErrorIs(t, err, sale.ErrHoldNotYours)
	clock.Advance(10 * time.Second)
	require.Empty(t, taken(t, s, cfg.ID), "an expired hold frees its seats by itself")
	hb := mustHold(t, s, b, 0, "S-02", "S-03")
	_, err = s.BeginBooking(ctx, a.TicketRef, ha.ID, time.Second)
	require.True(t, errors.Is(err, sale.ErrHoldExpired) || errors.Is(err, sale.ErrHoldNotFound), "%v", err)
	require.NoError(t, s.Release(ctx, b.TicketRef, hb.ID))
	require.ErrorIs(t, s.Release(ctx, b.TicketRef, hb.ID), sale.ErrHoldNotFound)
	require.Empty(t, taken(t, s, cfg.ID))
	// An expired hold not swept yet is taken over by the next hold on its seats.
	ha = mustHold(t, s, a, 0, "S-04")
	clock.Advance(10 * time.Second)
	c, err := s.Counts(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 4, Held: 1}, c, "Counts sweeps nothing: the expired hold still counts")
	_, err = s.BeginBooking(ctx, a.TicketRef, ha.ID, time.Second)
	require.ErrorIs(t, err, sale.ErrHoldExpired, "Counts left the expired hold for the booking to see")
	ha = mustHold(t, s, a, 0, "S-04")
	clock.Advance(10 * time.Second)
	mustHold(t, s, b, 0, "S-04")
	_, err = s.BeginBooking(ctx, a.TicketRef, ha.ID, time.Second)
	require.Error(t, err)
	require.Equal(t, map[string]sale.SeatState{"S-04": sale.SeatHeld}, taken(t, s, cfg.ID))
}

// testBookingSellsOutAndCancelReopens: a committed booking sells its units and completes the
// session, and a retried commit changes nothing; the last unit sells the line out; a cancellation
// reopens the sale.
func testBookingSellsOutAndCancelReopens(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(3)}, func(c *queue.EventConfig) { c.MaxActive = 2 })
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	w1, w2 := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	require.Equal(t, queue.StatusQueued, w2.Status)
	ha := mustHold(t, s, a, 0, "S-01", "S-02")
	hb := mustHold(t, s, b, 0, "S-03")
	c := book(t, s, a, ha, "bk-a")
	require.Equal(t, sale.Counts{Capacity: 3, Sold: 2, Held: 1}, c)
	require.Equal(t, queue.StatusCompleted, status(t, q, a).Status)
	again, err := s.CommitBooking(ctx, sale.CommitParams{Ticket: a.TicketRef, HoldID: ha.ID,
		Booking: sale.Booking{ID: "bk-a", Quantity: 2, Seats: ha.Seats}})
	require.NoError(t, err)
	require.Equal(t, c, again, "a retried commit changes nothing")
	require.Equal(t, int64(1), admit(t, q, cfg.ID, 0).Admitted, "the completed session freed its slot")
	w1 = status(t, q, w1)
	require.Equal(t, queue.StatusAdmitted, w1.Status)
	_, err = hold(t, s, w1, 0, "S-01")
	require.ErrorAs(t, err, new(*sale.ConflictError), "a sold seat")

	c = book(t, s, b, hb, "bk-b")
	require.True(t, c.SoldOut)
	require.Equal(t, int64(1), c.Passed, "the sell-out passed over the waiting ticket")
	require.Equal(t, queue.StatusSoldOut, status(t, q, w2).Status)
	_, err = q.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrSoldOut)
	_, err = hold(t, s, w1, 0, "S-01")
	require.ErrorIs(t, err, sale.ErrSoldOut)
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 3, Sold: 3, SoldOut: true}, av.Counts)
	require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatSold, "S-02": sale.SeatSold, "S-03": sale.SeatSold}, av.Taken)

	// Cancelling returns the units and reopens the sale for new joins; SOLD_OUT stays.
	c, err = s.CancelBooking(ctx, cfg.ID, sale.Booking{ID: "bk-a", Quantity: 2, Seats: []string{"S-01", "S-02"}})
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 3, Sold: 1}, c)
	again, err = s.CancelBooking(ctx, cfg.ID, sale.Booking{ID: "bk-a", Quantity: 2, Seats: []string{"S-01", "S-02"}})
	require.NoError(t, err)
	require.Equal(t, c, again)
	require.Equal(t, queue.StatusSoldOut, status(t, q, w2).Status)
	fresh := join(t, q, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, status(t, q, fresh).Status)
	mustHold(t, s, w1, 0, "S-01", "S-02")
}

// testRestoreReplacesTheSoldState: Restore replaces the sold state with the database's bookings,
// dropping holds on sold seats; only the cancellations listed remove a booking.
func testRestoreReplacesTheSoldState(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(4)}, func(c *queue.EventConfig) { c.MaxActive = 2 })
	a, b, w := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	mustHold(t, s, a, 0, "S-01", "S-02")
	hb := mustHold(t, s, b, 0, "S-04")
	c, err := s.Restore(ctx, cfg.ID, []sale.Booking{{ID: "x", Quantity: 2, Seats: []string{"S-02", "S-03"}}}, nil)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 4, Sold: 2, Held: 1}, c, "the hold on a sold seat is dropped")
	require.Equal(t, map[string]sale.SeatState{"S-02": sale.SeatSold, "S-03": sale.SeatSold, "S-04": sale.SeatHeld},
		taken(t, s, cfg.ID))
	c, err = s.Restore(ctx, cfg.ID, []sale.Booking{{ID: "y", Quantity: 2, Seats: []string{"S-01", "S-04"}}}, nil)
	require.NoError(t, err)
	require.True(t, c.SoldOut)
	require.Equal(t, int64(1), c.Passed)
	require.Equal(t, queue.StatusSoldOut, status(t, q, w).Status)
	_, err = s.BeginBooking(ctx, b.TicketRef, hb.ID, time.Second)
	require.ErrorIs(t, err, sale.ErrHoldNotFound)
	// A stale read (y missing) drops nothing; only the database's cancellations do.
	c, err = s.Restore(ctx, cfg.ID, []sale.Booking{{ID: "x", Quantity: 2, Seats: []string{"S-02", "S-03"}}}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Sold)
	c, err = s.Restore(ctx, cfg.ID, []sale.Booking{{ID: "y", Quantity: 2, Seats: []string{"S-01", "S-04"}}}, []string{"x", "nope"})
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 4, Sold: 2}, c)
	require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatSold, "S-04": sale.SeatSold}, taken(t, s, cfg.ID))
	join(t, q, cfg.ID, "") // on sale again
	// A recorded booking is known after a restore: its commit is not counted twice.
	c, err = s.CommitBooking(ctx, sale.CommitParams{Ticket: a.TicketRef, HoldID: "gone",
		Booking: sale.Booking{ID: "y", Quantity: 2, Seats: []string{"S-01", "S-04"}}})
	require.NoError(t, err)
	require.Equal(t, int64(2), c.Sold)
}

// testConcurrentOverlappingHolds: 200 admitted tickets race for 40 seats (see runSaleConcurrency).
func testConcurrentOverlappingHolds(t *testing.T, newStores SaleFactory) {
	q, s := newStores(t, nil)
	runSaleConcurrency(t, q, s, 200, 40)
}

// runSaleConcurrency has users admitted tickets race for seats with overlapping holds of 1-4
// seats, booking what they hold. It checks that no seat is booked twice, that every hold was
// applied whole or not at all, and that the store's final state agrees with the bookings.
func runSaleConcurrency(t *testing.T, q queue.Store, s sale.Store, users, seats int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(seats)}, func(c *queue.EventConfig) { c.MaxActive = int64(users) })
	names := seatNames(seats)
	var mu sync.Mutex
	bookedBy := map[string]int{}
	var sold atomic.Int64
	var wg sync.WaitGroup
	for u := 0; u < users; u++ {
		wg.Go(func() {
			tk, err := q.Join(ctx, queue.JoinParams{Event: cfg.ID})
			if err != nil {
				if !errors.Is(err, queue.ErrSoldOut) {
					t.Error(err)
				}
				return
			}
			rng := rand.New(rand.NewPCG(uint64(u), 7))
			for attempt := 0; attempt < 20; attempt++ {
				want := make([]string, 0, 4)
				for _, i := range rng.Perm(seats)[:1+rng.IntN(4)] {
					want = append(want, names[i])
				}
				h, err := s.Hold(ctx, sale.HoldParams{Ticket: tk.TicketRef, HoldID: fmt.Sprintf("u%d-%d", u, attempt), Seats: want})
				if errors.Is(err, sale.ErrHoldConflict) || errors.Is(err, sale.ErrSoldOut) {
					if errors.Is(err, sale.ErrSoldOut) {
						return
					}
					continue
				}
				if err != nil {
					t.Errorf("hold: %v", err)
					return
				}
				if len(h.Seats) != len(want) {
					t.Errorf("partial hold: %v of %v", h.Seats, want)
				}
				b, err := s.BeginBooking(ctx, tk.TicketRef, h.ID, 30*time.Second)
				if err != nil {
					t.Errorf("begin: %v", err)
					return
				}
				if _, err := s.CommitBooking(ctx, sale.CommitParams{Ticket: tk.TicketRef, HoldID: h.ID,
					Booking: sale.Booking{ID: h.ID, Quantity: b.Quantity, Seats: b.Seats}}); err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				mu.Lock()
				for _, seat := range b.Seats {
					bookedBy[seat]++
				}
				mu.Unlock()
				sold.Add(b.Quantity)
				return
			}
		})
	}
	wg.Wait()
	for seat, n := range bookedBy {
		require.Equal(t, 1, n, "seat %s booked %d times", seat, n)
	}
	a, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sold.Load(), a.Sold)
	require.Zero(t, a.Held)
	for seat := range bookedBy {
		require.Equal(t, sale.SeatSold, a.Taken[seat])
	}
	require.Len(t, a.Taken, len(bookedBy))
}

// testPutInventoryReportsSold: every PutInventory, changed or not, reports the units sold as
// the store counts them (the sale sync compares it with the database's count).
func testPutInventoryReportsSold(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	q, s := newStores(t, NewClock().Now)
	inv := sale.Inventory{Capacity: 5}
	cfg := newSale(t, q, s, inv, nil)
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	book(t, s, a, mustHold(t, s, a, 2), "bk-a")
	r, err := s.PutInventory(ctx, inventory(cfg, inv))
	require.NoError(t, err)
	require.Equal(t, sale.PutResult{Ready: true, Sold: 2}, r)
	book(t, s, b, mustHold(t, s, b, 1), "bk-b")
	inv.MaxPerBooking = 3 // a changed configuration reports it too
	r, err = s.PutInventory(ctx, inventory(cfg, inv))
	require.NoError(t, err)
	require.Equal(t, sale.PutResult{Changed: true, Ready: true, Sold: 3}, r)
}

// testCapacityChangeMovesTheSoldOut: a capacity raised above what is sold puts a sold-out line
// on sale again at once, and one lowered to what is sold sells it out at once, passing over
// everyone waiting (it stayed sold out, or on sale, until a booking or a cancel before).
func testCapacityChangeMovesTheSoldOut(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	q, s := newStores(t, NewClock().Now)
	inv := sale.Inventory{Capacity: 1}
	cfg := newSale(t, q, s, inv, func(c *queue.EventConfig) { c.MaxActive = 2 })
	a := join(t, q, cfg.ID, "")
	require.True(t, book(t, s, a, mustHold(t, s, a, 1), "bk-a").SoldOut)
	_, err := q.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrSoldOut)

	inv.Capacity, inv.Version = 5, 2
	_, err = s.PutInventory(ctx, inventory(cfg, inv))
	require.NoError(t, err)
	b, c := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, status(t, q, b).Status, "on sale again: joins are taken")
	book(t, s, b, mustHold(t, s, b, 1), "bk-b")
	join(t, q, cfg.ID, "") // takes the slot b's booking freed
	w := join(t, q, cfg.ID, "")
	require.Equal(t, queue.StatusQueued, status(t, q, w).Status)

	inv.Capacity, inv.Version = 2, 3 // what is sold
	_, err = s.PutInventory(ctx, inventory(cfg, inv))
	require.NoError(t, err)
	require.Equal(t, queue.StatusSoldOut, status(t, q, w).Status, "the waiting ticket is passed over")
	_, err = q.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrSoldOut)
	_, err = hold(t, s, c, 1)
	require.ErrorIs(t, err, sale.ErrSoldOut)
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 2, Sold: 2, SoldOut: true}, av.Counts)
}

// testOlderInventoryNeverReverts: an inventory put with a version below the stored one, of the
// same epoch, changes nothing (a sync holding a copy read before a PUT, or another instance's
// cache, once raised a capacity lowered from 4 back to 4 right after the PUT answered, and two
// holds of 2 went through at capacity 3); a new epoch (the event deleted and created again)
// starts the versions over.
func testOlderInventoryNeverReverts(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	q, s := newStores(t, NewClock().Now)
	v1 := sale.Inventory{Capacity: 4, MaxPerBooking: 2, Version: 1, Epoch: "e1"}
	cfg := newSale(t, q, s, v1, nil)
	v1 = inventory(cfg, v1)
	v2 := v1
	v2.Capacity, v2.Version = 3, 2
	r, err := s.PutInventory(ctx, v2)
	require.NoError(t, err)
	require.True(t, r.Changed)
	r, err = s.PutInventory(ctx, v1)
	require.NoError(t, err)
	require.False(t, r.Changed, "version 1 after version 2")
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	mustHold(t, s, a, 2)
	_, err = hold(t, s, b, 2)
	var conflict *sale.ConflictError
	require.ErrorAs(t, err, &conflict, "capacity 3 with 2 held")
	require.Equal(t, int64(1), conflict.Available)

	again := v1 // the event deleted and created again: version 1 of a new epoch
	again.Epoch, again.Capacity = "e2", 5
	r, err = s.PutInventory(ctx, again)
	require.NoError(t, err)
	require.True(t, r.Changed)
	mustHold(t, s, b, 2)
}

// testChangedInventoryDropsHoldsItNoLongerSells: a hold on a seat the new configuration takes
// off the list, or of the other kind (seats when the event now sells a quantity, or the
// reverse), is dropped with the change: booked, it would sell what the event no longer has.
// Holds that still fit are kept.
func testChangedInventoryDropsHoldsItNoLongerSells(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	q, s := newStores(t, NewClock().Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(4)}, nil)
	a, b, c := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	ha := mustHold(t, s, a, 0, "S-04")
	hb := mustHold(t, s, b, 0, "S-01")
	hc := mustHold(t, s, c, 0, "S-02", "S-03")

	put := func(inv sale.Inventory) {
		t.Helper()
		r, err := s.PutInventory(ctx, inventory(cfg, inv))
		require.NoError(t, err)
		require.True(t, r.Changed)
	}
	put(sale.Inventory{Seats: seatNames(3)}) // S-04 taken off
	_, err := s.BeginBooking(ctx, a.TicketRef, ha.ID, time.Minute)
	require.ErrorIs(t, err, sale.ErrHoldNotFound, "a hold on a seat taken off the list")
	require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatHeld, "S-02": sale.SeatHeld, "S-03": sale.SeatHeld},
		taken(t, s, cfg.ID))
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 3, Held: 3}, av.Counts)
	book(t, s, b, hb, "bk-b") // a hold that still fits books

	// General admission now: the seats held are no longer sold.
	put(sale.Inventory{Capacity: 5})
	_, err = s.BeginBooking(ctx, c.TicketRef, hc.ID, time.Minute)
	require.ErrorIs(t, err, sale.ErrHoldNotFound, "a hold of seats on an event of general admission")
	hq := mustHold(t, s, c, 2)
	av, err = s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), av.Held)

	// Seated again: a hold of a quantity is no longer sold either.
	put(sale.Inventory{Seats: seatNames(3)})
	_, err = s.BeginBooking(ctx, c.TicketRef, hq.ID, time.Minute)
	require.ErrorIs(t, err, sale.ErrHoldNotFound, "a hold of a quantity on a seated event")
	av, err = s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, av.Held)
	mustHold(t, s, a, 0, "S-02")
}

// testLeavingReleasesTheHold: a ticket that leaves frees its hold at once, not at the hold's
// expiry (hold_ttl).
func testLeavingReleasesTheHold(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(3)}, nil)
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	mustHold(t, s, a, 0, "S-01", "S-02")
	_, err := hold(t, s, b, 0, "S-01")
	require.ErrorAs(t, err, new(*sale.ConflictError))
	require.NoError(t, q.Leave(ctx, a.TicketRef))
	require.Empty(t, taken(t, s, cfg.ID), "the seats of a ticket that left are free at once")
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 3}, av.Counts)
	mustHold(t, s, b, 0, "S-01")
}

// testEndedSessionReleasesTheHold: a hold goes with its ticket's admitted session, whether the
// admission step's sweep or a status read finds the session ended.
func testEndedSessionReleasesTheHold(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	inv := sale.Inventory{Capacity: 10, MaxPerBooking: 10, HoldTTL: time.Hour}
	cfg := newSale(t, q, s, inv, func(c *queue.EventConfig) { c.SessionTTL = 10 * time.Second })
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	mustHold(t, s, a, 4)
	clock.Advance(5 * time.Second)
	mustHold(t, s, b, 3) // b's session now ends 5 s after a's
	clock.Advance(5 * time.Second)
	require.Equal(t, int64(1), admit(t, q, cfg.ID, 0).Expired)
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(3), av.Held, "the sweep ended a's session and released its 4 units")
	clock.Advance(5 * time.Second)
	require.Equal(t, queue.StatusExpired, status(t, q, b).Status) // before any sweep
	av, err = s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, av.Held, "the status read ended b's session and released its units")
	c := join(t, q, cfg.ID, "")
	mustHold(t, s, c, 10)
}

// testBookingGraceOutlivesTheSession: a hold being booked (BeginBooking) is kept for the
// booking grace even if the session ends meanwhile, then released; the booking can still be
// recorded within the grace.
func testBookingGraceOutlivesTheSession(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(3), HoldTTL: time.Hour},
		func(c *queue.EventConfig) { c.SessionTTL = 10 * time.Second })
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	ha := mustHold(t, s, a, 0, "S-01")
	hb := mustHold(t, s, b, 0, "S-02")
	_, err := s.BeginBooking(ctx, a.TicketRef, ha.ID, 30*time.Second)
	require.NoError(t, err)
	_, err = s.BeginBooking(ctx, b.TicketRef, hb.ID, 30*time.Second)
	require.NoError(t, err)
	clock.Advance(10 * time.Second)
	admit(t, q, cfg.ID, 0) // both sessions end; their holds stay for the grace
	c := join(t, q, cfg.ID, "")
	require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatHeld, "S-02": sale.SeatHeld}, taken(t, s, cfg.ID))
	got, err := s.CommitBooking(ctx, sale.CommitParams{Ticket: a.TicketRef, HoldID: ha.ID,
		Booking: sale.Booking{ID: "bk-a", Quantity: 1, Seats: []string{"S-01"}}})
	require.NoError(t, err, "the database confirmed it within the grace")
	require.Equal(t, int64(1), got.Sold)
	_, err = hold(t, s, c, 0, "S-02")
	require.ErrorAs(t, err, new(*sale.ConflictError), "b's booking is still within its grace")
	for range 2 { // c stays active (status reads) while the grace runs out
		clock.Advance(9 * time.Second)
		require.Equal(t, queue.StatusAdmitted, status(t, q, c).Status)
	}
	_, err = hold(t, s, c, 0, "S-02")
	require.ErrorAs(t, err, new(*sale.ConflictError), "28 s into the grace")
	clock.Advance(2*time.Second + time.Millisecond) // the grace (30 s from BeginBooking) is over, not the hour
	mustHold(t, s, c, 0, "S-02")
}

// testReleaseDuringBookingKeepsTheUnits: a hold its holder releases while its booking runs
// (between BeginBooking and the booking's end) is not handed out meanwhile, since the database
// may be confirming it right now: it ends with its booking grace. A booking that then commits
// sells it; one that fails does not bring back the hold's own time (helper-68: the seats were
// held by another ticket while the booking sold them).
func testReleaseDuringBookingKeepsTheUnits(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Seats: seatNames(3), HoldTTL: time.Hour},
		func(c *queue.EventConfig) { c.SessionTTL = time.Hour })
	a, b, c := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	ha, hb := mustHold(t, s, a, 0, "S-01"), mustHold(t, s, b, 0, "S-02")
	for _, p := range []struct {
		tk queue.Ticket
		h  sale.Hold
	}{{a, ha}, {b, hb}} {
		_, err := s.BeginBooking(ctx, p.tk.TicketRef, p.h.ID, 30*time.Second)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, p.tk.TicketRef, p.h.ID))
	}
	for _, seat := range []string{"S-01", "S-02"} {
		_, err := hold(t, s, c, 0, seat)
		require.ErrorAs(t, err, new(*sale.ConflictError), "%s was handed out while its booking ran", seat)
	}
	got, err := s.CommitBooking(ctx, sale.CommitParams{Ticket: a.TicketRef, HoldID: ha.ID,
		Booking: sale.Booking{ID: "bk-a", Quantity: 1, Seats: []string{"S-01"}}})
	require.NoError(t, err, "the database confirmed it within the grace")
	require.Equal(t, int64(1), got.Sold)
	require.NoError(t, s.EndBooking(ctx, b.TicketRef, hb.ID)) // b's booking failed
	clock.Advance(29 * time.Second)
	_, err = hold(t, s, c, 0, "S-02")
	require.ErrorAs(t, err, new(*sale.ConflictError), "within the grace")
	clock.Advance(time.Second + time.Millisecond) // the grace is over, not the hour
	mustHold(t, s, c, 0, "S-02")
	require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatSold, "S-02": sale.SeatHeld}, taken(t, s, cfg.ID))
}

// testBookingReleasesAHoldMadeMeanwhile: a hold the ticket makes while its booking runs
// (between BeginBooking and CommitBooking) is released when the booking completes the session,
// not kept until its time is up: a buyer cannot lock more units with every purchase.
func testBookingReleasesAHoldMadeMeanwhile(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	for _, seated := range []bool{false, true} {
		inv := sale.Inventory{Capacity: 10, MaxPerBooking: 4, HoldTTL: time.Hour}
		qty1, qty2, first, second := int64(1), int64(4), []string(nil), []string(nil)
		if seated {
			inv = sale.Inventory{Seats: seatNames(10), MaxPerBooking: 4, HoldTTL: time.Hour}
			qty1, qty2, first, second = 0, 0, []string{"S-01"}, []string{"S-02", "S-03", "S-04", "S-05"}
		}
		inv.Epoch = "life-1"
		cfg := newSale(t, q, s, inv, nil)
		a := join(t, q, cfg.ID, "")
		h1 := mustHold(t, s, a, qty1, first...)
		b, err := s.BeginBooking(ctx, a.TicketRef, h1.ID, 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, "life-1", b.Epoch, "the life the hold was made in, for the database to check")
		mustHold(t, s, a, qty2, second...) // while the database writes the booking
		c, err := s.CommitBooking(ctx, sale.CommitParams{Ticket: a.TicketRef, HoldID: h1.ID,
			Booking: sale.Booking{ID: "bk-" + cfg.ID, Quantity: b.Quantity, Seats: b.Seats}})
		require.NoError(t, err)
		require.Equal(t, int64(1), c.Sold, "seated %v", seated)
		require.Zero(t, c.Held, "seated %v: the hold made during the booking was released with the session", seated)
		av, err := s.Availability(ctx, cfg.ID)
		require.NoError(t, err)
		require.Zero(t, av.Held, "seated %v", seated)
		if seated {
			require.Equal(t, map[string]sale.SeatState{"S-01": sale.SeatSold}, av.Taken)
		}
	}
}

// testFailedBookingsDoNotKeepTheHold: each booking attempt keeps its hold for the grace, but
// attempts that keep failing (a buyer past max_per_user, retrying) cannot keep it past its own
// time plus one grace: the hold lives at most hold_ttl_s plus the grace.
func testFailedBookingsDoNotKeepTheHold(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Capacity: 3, MaxPerBooking: 1, HoldTTL: 3 * time.Second},
		func(c *queue.EventConfig) { c.SessionTTL = time.Hour })
	a, b := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")
	h := mustHold(t, s, a, 1)
	got, err := s.BeginBooking(ctx, a.TicketRef, h.ID, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, clock.Now().Add(30*time.Second).UnixMilli(), got.ExpiresAt.UnixMilli(), "the first attempt: the grace")
	for range 4 { // the database refuses each; the buyer tries again every 6 s
		clock.Advance(6 * time.Second)
		got, err = s.BeginBooking(ctx, a.TicketRef, h.ID, 30*time.Second)
		require.NoError(t, err)
		require.LessOrEqual(t, got.ExpiresAt.UnixMilli(), h.ExpiresAt.Add(30*time.Second).UnixMilli(),
			"an attempt keeps the hold no longer than its time plus one grace")
	}
	clock.Advance(9 * time.Second) // 33 s after the hold: its 3 s and one grace
	_, err = s.BeginBooking(ctx, a.TicketRef, h.ID, 30*time.Second)
	require.True(t, errors.Is(err, sale.ErrHoldExpired) || errors.Is(err, sale.ErrHoldNotFound), "%v", err)
	mustHold(t, s, b, 1)
	av, err := s.Availability(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), av.Held, "a's hold is gone")
}

// testRefusedBookingEndsItsGrace: a booking attempt the database refused (EndBooking) no longer
// keeps its hold past the session or past the hold's own time: a buyer past max_per_user who
// leaves after the refusal frees the hold at once (it must not park units for the grace,
// leave, and do it again), one that left while the booking ran frees it when the refusal comes,
// and one still admitted keeps the hold until its own time, not the grace's.
func testRefusedBookingEndsItsGrace(t *testing.T, newStores SaleFactory) {
	ctx := context.Background()
	clock := NewClock()
	q, s := newStores(t, clock.Now)
	cfg := newSale(t, q, s, sale.Inventory{Capacity: 10, MaxPerBooking: 4, HoldTTL: 3 * time.Second},
		func(c *queue.EventConfig) { c.SessionTTL = time.Hour })
	held := func() int64 {
		t.Helper()
		av, err := s.Availability(ctx, cfg.ID)
		require.NoError(t, err)
		return av.Held
	}
	a, b, c := join(t, q, cfg.ID, ""), join(t, q, cfg.ID, ""), join(t, q, cfg.ID, "")

	// Refused, then the ticket leaves: the hold goes with it.
	ha := mustHold(t, s, a, 4)
	_, err := s.BeginBooking(ctx, a.TicketRef, ha.ID, 30*time.Second)
	require.NoError(t, err)
	require.ErrorIs(t, s.EndBooking(ctx, b.TicketRef, ha.ID), sale.ErrHoldNotYours)
	require.NoError(t, s.EndBooking(ctx, a.TicketRef, ha.ID))
	require.Equal(t, int64(4), held(), "a is still admitted: its hold stays")
	require.NoError(t, q.Leave(ctx, a.TicketRef))
	require.Zero(t, held(), "the refused booking's grace no longer keeps the hold of a ticket that left")

	// The ticket leaves while the booking runs (the grace keeps the hold), then the refusal.
	hb := mustHold(t, s, b, 4)
	_, err = s.BeginBooking(ctx, b.TicketRef, hb.ID, 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, q.Leave(ctx, b.TicketRef))
	require.Equal(t, int64(4), held(), "the booking may still be written: its grace keeps the hold")
	require.NoError(t, s.EndBooking(ctx, b.TicketRef, hb.ID))
	require.Zero(t, held(), "refused: nothing keeps the hold of a ticket that left")
	require.ErrorIs(t, s.EndBooking(ctx, b.TicketRef, hb.ID), sale.ErrHoldNotFound)

	// Still admitted: the hold keeps its own time (3 s), not the grace (30 s).
	hc := mustHold(t, s, c, 4)
	got, err := s.BeginBooking(ctx, c.TicketRef, hc.ID, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, clock.Now().Add(30*time.Second).UnixMilli(), got.ExpiresAt.UnixMilli())
	require.NoError(t, s.EndBooking(ctx, c.TicketRef, hc.ID))
	clock.Advance(3*time.Second + time.Millisecond)
	d := join(t, q, cfg.ID, "")
	mustHold(t, s, d, 4)
	mustHold(t, s, join(t, q, cfg.ID, ""), 4)
	require.Equal(t, int64(8), held(), "c's hold ended at its own time")
}

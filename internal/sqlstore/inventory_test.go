package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// putCapacity creates or updates event id (sampleEvent's settings) with capacity units.
func putCapacity(t *testing.T, db *sqlstore.DB, id string, capacity int64) error {
	t.Helper()
	e := sampleEvent(id)
	e.Capacity = capacity
	_, _, err := db.PutEvent(t.Context(), e)
	return err
}

// booked is what CreateBooking answers.
type booked struct {
	Booking sale.BookingRecord
	Created bool
}

// bookUnits books qty units of event for ticket (anonymous unless user is set).
func bookUnits(ctx context.Context, db *sqlstore.DB, event, ticket, user string, qty int64) (booked, error) {
	b, created, err := db.CreateBooking(ctx, sale.BookingRecord{ID: "bk_" + ticket, Event: event, TicketID: ticket,
		HoldID: "h_" + ticket, TokenHash: "x", Quantity: qty, UserKey: user})
	return booked{b, created}, err
}

func requireInventory(t *testing.T, db *sqlstore.DB, event string, capacity, sold int64) {
	t.Helper()
	c, s, err := db.Inventory(t.Context(), event)
	require.NoError(t, err)
	require.Equal(t, [2]int64{capacity, sold}, [2]int64{c, s}, "capacity and sold of %s", event)
}

// testSellOutExactly: 80 concurrent bookings of 1 unit of a 50-unit event confirm exactly 50
// (the units are shared out between slots, and bookings take them from different slots); 60
// concurrent bookings of 1 to 4 units count exactly what they confirm.
func testSellOutExactly(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	require.NoError(t, putCapacity(t, db, "fifty", 50))
	requireInventory(t, db, "fifty", 50, 0)
	var wg sync.WaitGroup
	errs := make([]error, 80)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = bookUnits(ctx, db, "fifty", fmt.Sprintf("t%02d", i), "", 1)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		require.ErrorIs(t, err, sale.ErrNotEnoughUnits)
	}
	require.Equal(t, 50, ok)
	requireInventory(t, db, "fifty", 50, 50)
	_, err := bookUnits(ctx, db, "fifty", "late", "", 1)
	require.ErrorIs(t, err, sale.ErrNotEnoughUnits)

	// Bookings of 1 to 4 units, more than any slot's share at the end: what is confirmed is
	// what is counted, and single units sell what is left, to the last.
	require.NoError(t, putCapacity(t, db, "mixed", 97))
	units := make([]int64, 60)
	for i := range units {
		wg.Go(func() {
			if _, err := bookUnits(ctx, db, "mixed", fmt.Sprintf("m%02d", i), "", int64(1+i%4)); err == nil {
				units[i] = int64(1 + i%4)
			} else {
				assert.ErrorIs(t, err, sale.ErrNotEnoughUnits)
			}
		})
	}
	wg.Wait()
	var sold int64
	for _, u := range units {
		sold += u
	}
	requireInventory(t, db, "mixed", 97, sold)
	for i := 0; sold < 97; i++ {
		_, err := bookUnits(ctx, db, "mixed", fmt.Sprintf("single%d", i), "", 1)
		require.NoError(t, err)
		sold++
	}
	requireInventory(t, db, "mixed", 97, 97)
	_, err = bookUnits(ctx, db, "mixed", "late", "", 1)
	require.ErrorIs(t, err, sale.ErrNotEnoughUnits)
}

// testUnitsAcrossSlots: bookings larger than any one slot's share, cancellations and capacity
// changes keep the event's capacity and units sold exact.
func testUnitsAcrossSlots(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	// 20 units over the slots: no slot alone holds 4.
	require.NoError(t, putCapacity(t, db, "ga", 20))
	var first sale.BookingRecord
	for i := range 5 {
		r, err := bookUnits(ctx, db, "ga", fmt.Sprintf("t%d", i), "", 4)
		require.NoError(t, err, "booking %d of 4 units", i)
		require.True(t, r.Created)
		if i == 0 {
			first = r.Booking
		}
	}
	requireInventory(t, db, "ga", 20, 20)
	_, err := bookUnits(ctx, db, "ga", "extra", "", 1)
	require.ErrorIs(t, err, sale.ErrNotEnoughUnits)

	again, err := bookUnits(ctx, db, "ga", "t0", "", 4)
	require.NoError(t, err)
	require.False(t, again.Created, "a ticket books once")
	requireInventory(t, db, "ga", 20, 20)

	_, changed, err := db.CancelBooking(ctx, first.ID)
	require.NoError(t, err)
	require.True(t, changed)
	requireInventory(t, db, "ga", 20, 16)
	_, err = bookUnits(ctx, db, "ga", "t5", "", 3)
	require.NoError(t, err, "a cancellation's units are for sale again")
	requireInventory(t, db, "ga", 20, 19)

	// A capacity below the units sold is refused; a higher one puts more units for sale.
	require.ErrorIs(t, putCapacity(t, db, "ga", 18), event.ErrWouldDropSold)
	requireInventory(t, db, "ga", 20, 19)
	require.NoError(t, putCapacity(t, db, "ga", 40))
	requireInventory(t, db, "ga", 40, 19)
	for i := range 5 {
		_, err := bookUnits(ctx, db, "ga", fmt.Sprintf("u%d", i), "", 4)
		require.NoError(t, err)
	}
	_, err = bookUnits(ctx, db, "ga", "u5", "", 2)
	require.ErrorIs(t, err, sale.ErrNotEnoughUnits, "1 unit left")
	_, err = bookUnits(ctx, db, "ga", "u6", "", 1)
	require.NoError(t, err)
	requireInventory(t, db, "ga", 40, 40)

	// An event with nothing sold can stop selling; it is not for sale then.
	require.NoError(t, putCapacity(t, db, "gone", 3))
	require.NoError(t, putCapacity(t, db, "gone", 0))
	_, _, err = db.Inventory(ctx, "gone")
	require.ErrorIs(t, err, sale.ErrNotForSale)
	_, err = bookUnits(ctx, db, "gone", "t", "", 1)
	require.ErrorIs(t, err, sale.ErrNotForSale)
}

// TestBookingsDoNotQueue: while one booking's transaction is held open before its commit, other
// bookings of the same event (of other users, under max_per_user) commit. Before the inventory
// was split into slots, each waited for the held booking's lock on the event's one sold
// counter. PostgreSQL only: SQLite's transactions hold the whole database.
func TestBookingsDoNotQueue(t *testing.T) {
	ctx := t.Context()
	db := open(t, sqltest.Postgres(t))
	require.NoError(t, putCapacity(t, db, "busy", 100)) // sampleEvent has max_per_user 6
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	sqlstore.SetBeforeCommit(db, func(b sale.BookingRecord) {
		if b.TicketID == "held" {
			close(held)
			<-release
		}
	})
	heldErr := make(chan error, 1)
	go func() {
		_, err := bookUnits(ctx, db, "busy", "held", "user-held", 2)
		heldErr <- err
	}()
	deadline := time.After(30 * time.Second)
	select {
	case <-held:
	case <-deadline:
		t.Fatal("the held booking did not reach its commit")
	}
	const n = 8
	done := make(chan error, n)
	for i := range n {
		go func() {
			_, err := bookUnits(ctx, db, "busy", fmt.Sprintf("t%d", i), fmt.Sprintf("user-%d", i), 1)
			done <- err
		}()
	}
	for committed := 0; committed < n; committed++ {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-deadline:
			releaseAll()
			for ; committed < n; committed++ {
				<-done
			}
			<-heldErr
			t.Fatalf("bookings of the event waited for the held booking's transaction")
		}
	}
	requireInventory(t, db, "busy", 100, n)
	releaseAll()
	require.NoError(t, <-heldErr)
	requireInventory(t, db, "busy", 100, n+2)
}

// TestBookingOfADeletedEvent: a booking that reaches the database after its event was deleted
// is refused as event.ErrNotFound (a known outcome: nothing written), not a database error whose
// outcome the caller would have to find out.
func TestBookingOfADeletedEvent(t *testing.T) {
	for name, url := range map[string]string{"sqlite": sqltest.SQLite(t), "postgres": sqltest.Postgres(t)} {
		t.Run(name, func(t *testing.T) {
			db := open(t, url)
			require.NoError(t, putCapacity(t, db, "gone", 10))
			deleted, err := db.DeleteEvent(t.Context(), "gone")
			require.NoError(t, err)
			require.True(t, deleted)
			_, err = bookUnits(t.Context(), db, "gone", "late", "user-late", 1)
			require.ErrorIs(t, err, event.ErrNotFound)
		})
	}
}

// TestBookingOfAnEventCreatedAgain: a booking whose hold was made in an earlier life of its
// event (deleted and created again while the booking was on its way) is refused as
// event.ErrNotFound and writes nothing in the new life; one of the event's own life is written.
func TestBookingOfAnEventCreatedAgain(t *testing.T) {
	for name, url := range map[string]string{"sqlite": sqltest.SQLite(t), "postgres": sqltest.Postgres(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			db := open(t, url)
			e := sampleEvent("again")
			e.Capacity = 10
			old, _, err := db.PutEvent(ctx, e)
			require.NoError(t, err)
			_, err = db.DeleteEvent(ctx, "again")
			require.NoError(t, err)
			now, _, err := db.PutEvent(ctx, e)
			require.NoError(t, err)
			require.NotEqual(t, old.Epoch(), now.Epoch())
			book := func(ticket, epoch string) error {
				_, _, err := db.CreateBooking(ctx, sale.BookingRecord{ID: "bk_" + ticket, Event: "again", TicketID: ticket,
					HoldID: "h_" + ticket, TokenHash: "x", Quantity: 2, Epoch: epoch})
				return err
			}
			require.ErrorIs(t, book("old", old.Epoch()), event.ErrNotFound)
			_, err = db.BookingByTicket(ctx, "again", "old")
			require.ErrorIs(t, err, sale.ErrBookingNotFound)
			requireInventory(t, db, "again", 10, 0)
			require.NoError(t, book("new", now.Epoch()))
			requireInventory(t, db, "again", 10, 2)
		})
	}
}

// TestBookingSellsOnlyWhatTheEventLists: a booking of a seat the event's list no longer holds (a
// hold made before an event write took the seat off), or of the other kind (a quantity on a
// seated event, seats on one of general admission), is refused as *sale.InvalidError and writes
// nothing. A seat matches exactly: "C" is not in a list holding "C1".
func TestBookingSellsOnlyWhatTheEventLists(t *testing.T) {
	for name, url := range map[string]string{"sqlite": sqltest.SQLite(t), "postgres": sqltest.Postgres(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			db := open(t, url)
			e := sampleEvent("seated")
			e.Seats = []string{"A", "B", "C", "C1"}
			_, _, err := db.PutEvent(ctx, e)
			require.NoError(t, err)
			e.Seats = []string{"A", "B", "C1"} // C taken off while a hold on it lives
			_, _, err = db.PutEvent(ctx, e)
			require.NoError(t, err)
			bookSeats := func(ticket string, seats ...string) error {
				_, _, err := db.CreateBooking(ctx, sale.BookingRecord{ID: "bk_" + ticket, Event: "seated", TicketID: ticket,
					HoldID: "h_" + ticket, TokenHash: "x", Quantity: int64(len(seats)), Seats: seats})
				return err
			}
			err = bookSeats("t1", "A", "C")
			var ie *sale.InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, []string{"C"}, ie.Seats)
			_, err = db.BookingByTicket(ctx, "seated", "t1")
			require.ErrorIs(t, err, sale.ErrBookingNotFound, "a refused booking writes nothing")
			requireInventory(t, db, "seated", 3, 0)
			_, err = bookUnits(ctx, db, "seated", "t2", "", 1)
			require.ErrorIs(t, err, sale.ErrInvalidHold, "a quantity on a seated event")
			require.NoError(t, bookSeats("t3", "C1", "A"))
			requireInventory(t, db, "seated", 3, 2)

			require.NoError(t, putCapacity(t, db, "general", 5))
			_, _, err = db.CreateBooking(ctx, sale.BookingRecord{ID: "bk_t4", Event: "general", TicketID: "t4",
				HoldID: "h_t4", TokenHash: "x", Quantity: 1, Seats: []string{"A"}})
			require.ErrorIs(t, err, sale.ErrInvalidHold, "seats on an event of general admission")
			requireInventory(t, db, "general", 5, 0)

			// Units sold without seats: the event cannot turn seated (each seat would read free
			// while the units are sold).
			_, err = bookUnits(ctx, db, "general", "t5", "", 2)
			require.NoError(t, err)
			g := sampleEvent("general")
			g.Capacity, g.Seats = 5, []string{"A", "B", "C", "D", "E"}
			_, _, err = db.PutEvent(ctx, g)
			var de *event.DropError
			require.ErrorAs(t, err, &de)
			require.Equal(t, event.DropError{Sold: 2, Capacity: 5, Unseated: true}, *de)
			requireInventory(t, db, "general", 5, 2)
		})
	}
}

// TestEventWriteWaitsForABookingOfItsSeat: on PostgreSQL an event write that takes a seat off
// the list while a booking of that seat is between its check and its commit waits for the
// booking, then refuses the drop (the seat is sold). Without the booking's lock on the event's
// row the write committed first and the booking sold a seat the event no longer listed.
func TestEventWriteWaitsForABookingOfItsSeat(t *testing.T) {
	ctx := t.Context()
	url := sqltest.Postgres(t)
	db := open(t, url)
	e := sampleEvent("race")
	e.Seats = []string{"A", "B", "C"}
	_, _, err := db.PutEvent(ctx, e)
	require.NoError(t, err)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	sqlstore.SetBeforeCommit(db, func(sale.BookingRecord) {
		close(held)
		<-release
	})
	bookErr := make(chan error, 1)
	go func() {
		_, _, err := db.CreateBooking(ctx, sale.BookingRecord{ID: "bk_c", Event: "race", TicketID: "tc",
			HoldID: "h_c", TokenHash: "x", Quantity: 1, Seats: []string{"C"}})
		bookErr <- err
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the booking did not reach its commit")
	}
	putErr := make(chan error, 1)
	go func() {
		e.Seats = []string{"A", "B"}
		_, _, err := db.PutEvent(ctx, e)
		putErr <- err
	}()
	// Wait until the write either waits for a lock or is done (it must not be done).
	watch, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer watch.Close()
	var (
		ended error
		done  bool
	)
	eventually.True(t, 30*time.Second, "the event write to wait for a lock or end", func() bool {
		select {
		case ended = <-putErr:
			done = true
			return true
		default:
		}
		var waiting int
		require.NoError(t, watch.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	})
	if done {
		releaseAll()
		<-bookErr
		t.Fatalf("the event write did not wait for the booking of its seat (err %v)", ended)
	}
	releaseAll()
	require.NoError(t, <-bookErr)
	var de *event.DropError
	require.ErrorAs(t, <-putErr, &de)
	require.Equal(t, []string{"C"}, de.Seats)
}

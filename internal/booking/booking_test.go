package booking_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"))
}

// rig is one sale: a line store and its sale store, a database, a registry and the service.
type rig struct {
	lines queue.Store
	store sale.Store
	db    *sqlstore.DB
	reg   *registry.Registry
	svc   *booking.Service
	// flush deletes every key of the event (Redis only; nil for the memory store).
	flush func(event string)
	// client and prefix are the rig's Redis (nil for the memory store).
	client rueidis.Client
	prefix string
}

type rigOptions struct {
	cfg   func(*booking.Config)
	dbURL func(string) string
}

type rigOption func(*rigOptions)

func withConfig(f func(*booking.Config)) rigOption { return func(o *rigOptions) { o.cfg = f } }

func withDBURL(f func(string) string) rigOption { return func(o *rigOptions) { o.dbURL = f } }

// newRig builds a rig on Redis + PostgreSQL ("redis") or memory + SQLite ("memory"); opt, if
// given, changes the service's Config or the database URL (a proxy in front of it).
func newRig(t *testing.T, backend string, opt ...rigOption) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{}
	var url string
	switch backend {
	case "redis":
		c := redistest.Client(t)
		prefix := redistest.Prefix(t, c)
		s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix})
		require.NoError(t, err)
		r.lines, r.store = s, s
		r.flush = func(event string) { require.NoError(t, redisstore.DeletePrefix(ctx, c, prefix+"{"+event+"}")) }
		r.client, r.prefix = c, prefix
		url = sqltest.Postgres(t)
	default:
		s := memstore.New(memstore.Config{})
		r.lines, r.store = s, memstore.NewSales(s)
		url = sqltest.SQLite(t)
	}
	var o rigOptions
	for _, f := range opt {
		f(&o)
	}
	if o.dbURL != nil {
		url = o.dbURL(url)
	}
	var err error
	r.db, err = sqlstore.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.db.Close() })
	r.reg, err = registry.New(registry.Config{DB: r.db, Store: r.lines})
	require.NoError(t, err)

	cfg := booking.Config{DB: r.db, Store: r.store, Events: r.reg.List, Event: r.reg.Get, EnsureLine: r.reg.Restore}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	r.svc, err = booking.New(cfg)
	require.NoError(t, err)
	return r
}

func seatNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("A-%03d", i+1)
	}
	return out
}

func (r *rig) putEvent(t *testing.T, id string, maxActive int64, seats []string) {
	t.Helper()
	_, _, err := r.reg.Put(context.Background(), event.Event{ID: id, Name: id, MaxActive: maxActive,
		Capacity: int64(len(seats)), Seats: seats}, 0)
	require.NoError(t, err)
}

// admitted joins the event and returns an admitted ticket.
func (r *rig) admitted(t *testing.T, event string) queue.Ticket {
	t.Helper()
	tk, err := r.lines.Join(context.Background(), queue.JoinParams{Event: event})
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, tk.Status)
	return tk
}

func ticketID(ref queue.TicketRef) string {
	return fmt.Sprintf("%s.%d.%d", ref.Event, ref.Generation, ref.Number)
}

func (r *rig) book(ctx context.Context, tk queue.Ticket, holdID, key string) (booking.BookResult, error) {
	return r.svc.Book(ctx, booking.BookRequest{Ticket: tk.TicketRef, TicketID: ticketID(tk.TicketRef), HoldID: holdID,
		IdempotencyKey: key, TokenHash: "th-" + ticketID(tk.TicketRef)})
}

var backends = []string{"redis", "memory"}

// TestRaceForSeats: 500 admitted users race for 100 seats with overlapping holds of 1-4 seats,
// retrying on conflict and booking what they hold. Every seat is sold at most once, every hold
// was whole, and the database and the store agree at the end.
func TestRaceForSeats(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const users, seats = 500, 100
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r := newRig(t, backend)
			names := seatNames(seats)
			r.putEvent(t, "race", users, names)
			tickets := make([]queue.Ticket, users)
			for i := range tickets {
				tickets[i] = r.admitted(t, "race")
			}
			var (
				mu       sync.Mutex
				seen     = map[string]string{} // seat -> booking id, as clients saw their bookings
				booked   atomic.Int64
				partial  atomic.Int64
				conflict atomic.Int64
			)
			var wg sync.WaitGroup
			for u := range users {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(u), 42))
					tk := tickets[u]
					for attempt := 0; attempt < 50; attempt++ {
						// Overlap on purpose: a window of 12 seats around a random start.
						start := rng.IntN(seats)
						want := map[string]bool{}
						for n := 1 + rng.IntN(4); len(want) < n; {
							want[names[(start+rng.IntN(12))%seats]] = true
						}
						list := make([]string, 0, len(want))
						for s := range want {
							list = append(list, s)
						}
						h, err := r.svc.Hold(ctx, booking.HoldRequest{Ticket: tk.TicketRef, Seats: list})
						if errors.Is(err, sale.ErrHoldConflict) {
							conflict.Add(1)
							continue
						}
						if errors.Is(err, sale.ErrSoldOut) {
							return
						}
						if err != nil {
							t.Errorf("user %d: hold: %v", u, err)
							return
						}
						slices.Sort(list)
						if !slices.Equal(h.Seats, list) {
							partial.Add(1)
						}
						res, err := r.book(ctx, tk, h.ID, fmt.Sprint("key-", u))
						if errors.Is(err, sale.ErrHoldConflict) || errors.Is(err, sale.ErrSoldOut) {
							t.Errorf("user %d: the database refused a hold the store gave: %v", u, err)
							return
						}
						if err != nil {
							t.Errorf("user %d: book: %v", u, err)
							return
						}
						mu.Lock()
						for _, s := range res.Booking.Seats {
							if prev, ok := seen[s]; ok {
								t.Errorf("seat %s sold twice: %s and %s", s, prev, res.Booking.ID)
							}
							seen[s] = res.Booking.ID
						}
						mu.Unlock()
						booked.Add(res.Booking.Quantity)
						return
					}
				})
			}
			wg.Wait()
			require.Zero(t, partial.Load(), "holds are all or nothing")
			t.Logf("%s: %d seats booked, %d conflicts retried", backend, booked.Load(), conflict.Load())
			require.Greater(t, conflict.Load(), int64(0), "the holds overlapped")

			// The database and the store agree.
			capacity, sold, err := r.db.Inventory(ctx, "race")
			require.NoError(t, err)
			require.Equal(t, int64(seats), capacity)
			require.Equal(t, booked.Load(), sold)
			rows, err := r.db.SoldSeatCount(ctx, "race")
			require.NoError(t, err)
			require.Equal(t, sold, rows)
			bookings, err := r.db.SoldBookings(ctx, "race")
			require.NoError(t, err)
			dbSeats := map[string]string{}
			for _, b := range bookings {
				for _, s := range b.Seats {
					dbSeats[s] = b.ID
				}
			}
			require.Equal(t, seen, dbSeats)
			a, err := r.store.Availability(ctx, "race")
			require.NoError(t, err)
			require.Equal(t, sold, a.Sold)
			require.Zero(t, a.Held)
			storeSold := map[string]bool{}
			for s, st := range a.Taken {
				require.Equal(t, sale.SeatSold, st, s)
				storeSold[s] = true
			}
			require.Len(t, storeSold, len(dbSeats))
			for s := range dbSeats {
				require.True(t, storeSold[s], s)
			}
			if sold == seats {
				require.True(t, a.SoldOut)
				_, err := r.lines.Join(ctx, queue.JoinParams{Event: "race"})
				require.ErrorIs(t, err, queue.ErrSoldOut)
			}
		})
	}
}

// TestFlushBetweenSalesNeverResells: a sale, then Redis loses every key of the event, then a
// second sale: the booked seats are not sold again (the store is rebuilt from the database
// before it takes a hold), and a store that is wrong is overruled by the database.
func TestFlushBetweenSalesNeverResells(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "redis")
	r.putEvent(t, "flush", 10, seatNames(4))

	a := r.admitted(t, "flush")
	h, err := r.svc.Hold(ctx, booking.HoldRequest{Ticket: a.TicketRef, Seats: []string{"A-001", "A-002"}})
	require.NoError(t, err)
	first, err := r.book(ctx, a, h.ID, "k1")
	require.NoError(t, err)

	r.flush("flush") // Redis restarted empty, as far as this event goes
	require.NoError(t, r.reg.Restore(ctx, "flush"))
	b := r.admitted(t, "flush")
	_, err = r.svc.Hold(ctx, booking.HoldRequest{Ticket: b.TicketRef, Seats: []string{"A-002", "A-003"}})
	var ce *sale.ConflictError
	require.ErrorAs(t, err, &ce, "the sold seat is known again")
	require.Equal(t, []string{"A-002"}, ce.Seats)
	h, err = r.svc.Hold(ctx, booking.HoldRequest{Ticket: b.TicketRef, Seats: []string{"A-003"}})
	require.NoError(t, err)
	second, err := r.book(ctx, b, h.ID, "k2")
	require.NoError(t, err)
	require.Equal(t, []string{"A-003"}, second.Booking.Seats)

	// Redis is wrong (it believes the first booking was cancelled): the database refuses the
	// resale, and the refusal rebuilds the store.
	_, err = r.store.CancelBooking(ctx, "flush", sale.Booking{ID: first.Booking.ID, Quantity: 2, Seats: first.Booking.Seats})
	require.NoError(t, err)
	c := r.admitted(t, "flush")
	h, err = r.svc.Hold(ctx, booking.HoldRequest{Ticket: c.TicketRef, Seats: []string{"A-001"}})
	require.NoError(t, err, "the stale store gives the hold")
	_, err = r.book(ctx, c, h.ID, "k3")
	require.ErrorAs(t, err, &ce)
	require.Equal(t, []string{"A-001"}, ce.Seats)
	av, err := r.store.Availability(ctx, "flush")
	require.NoError(t, err)
	require.Equal(t, int64(3), av.Sold, "the refusal rebuilt the store")

	// `waitroom reconcile` after another loss.
	r.flush("flush")
	require.NoError(t, r.reg.Sync(ctx))
	counts, err := r.svc.ReconcileAll(ctx)
	require.NoError(t, err)
	require.Equal(t, sale.Counts{Capacity: 4, Sold: 3}, counts["flush"])
	rows, err := r.db.SoldSeatCount(ctx, "flush")
	require.NoError(t, err)
	require.Equal(t, int64(3), rows)
	got, err := r.db.GetBooking(ctx, first.Booking.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"A-001", "A-002"}, got.Seats)
}

// TestIdempotencyCancelAndSoldOut covers retries, a second booking, the sell-out and the
// admin's cancel on both backends.
func TestIdempotencyCancelAndSoldOut(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newRig(t, backend)
			r.putEvent(t, "idem", 1, seatNames(3))
			a := r.admitted(t, "idem")
			h, err := r.svc.Hold(ctx, booking.HoldRequest{Ticket: a.TicketRef, Seats: []string{"A-001", "A-002"}})
			require.NoError(t, err)
			first, err := r.book(ctx, a, h.ID, "same")
			require.NoError(t, err)
			require.False(t, first.Replayed)
			st, err := r.lines.Status(ctx, a.TicketRef)
			require.NoError(t, err)
			require.Equal(t, queue.StatusCompleted, st.Status)
			require.Equal(t, first.Booking.ID, r.svc.BookingOf(ctx, "idem", ticketID(a.TicketRef)))

			again, err := r.book(ctx, a, h.ID, "same")
			require.NoError(t, err, "a retry after the session ended")
			require.True(t, again.Replayed)
			require.Equal(t, first.Booking, again.Booking)
			_, err = r.book(ctx, a, h.ID, "other")
			require.ErrorIs(t, err, booking.ErrAlreadyBooked)
			_, err = r.book(ctx, a, "hd_other", "same")
			require.ErrorIs(t, err, booking.ErrIdempotencyMismatch)

			b := r.admitted(t, "idem")
			w := func() queue.Ticket {
				tk, err := r.lines.Join(ctx, queue.JoinParams{Event: "idem"})
				require.NoError(t, err)
				return tk
			}()
			require.Equal(t, queue.StatusQueued, w.Status)
			_, err = r.book(ctx, b, h.ID, "")
			require.ErrorIs(t, err, sale.ErrHoldNotFound, "a booked hold is gone")
			hb, err := r.svc.Hold(ctx, booking.HoldRequest{Ticket: b.TicketRef, Seats: []string{"A-003"}})
			require.NoError(t, err)
			_, err = r.book(ctx, a, hb.ID, "")
			require.ErrorIs(t, err, booking.ErrAlreadyBooked)
			last, err := r.book(ctx, b, hb.ID, "")
			require.NoError(t, err)
			sold, soldOut, err := r.svc.Sold(ctx, "idem")
			require.NoError(t, err)
			require.True(t, soldOut)
			require.Equal(t, int64(3), sold)
			st, err = r.lines.Status(ctx, w.TicketRef)
			require.NoError(t, err)
			require.Equal(t, queue.StatusSoldOut, st.Status)
			_, err = r.lines.Join(ctx, queue.JoinParams{Event: "idem"})
			require.ErrorIs(t, err, queue.ErrSoldOut)

			cancelled, changed, err := r.svc.Cancel(ctx, last.Booking.ID)
			require.NoError(t, err)
			require.True(t, changed)
			require.Equal(t, sale.BookingCancelled, cancelled.Status)
			again2, changed, err := r.svc.Cancel(ctx, last.Booking.ID)
			require.NoError(t, err)
			require.False(t, changed, "cancelled already")
			require.Equal(t, sale.BookingCancelled, again2.Status)
			sold, soldOut, err = r.svc.Sold(ctx, "idem")
			require.NoError(t, err)
			require.False(t, soldOut)
			require.Equal(t, int64(2), sold)
			c := r.admitted(t, "idem") // the sale reopened for new joins
			_, err = r.svc.Hold(ctx, booking.HoldRequest{Ticket: c.TicketRef, Seats: []string{"A-003"}})
			require.NoError(t, err)
			_, _, err = r.svc.Cancel(ctx, "bk_nope")
			require.ErrorIs(t, err, sale.ErrBookingNotFound)
		})
	}
}

// raceStore runs before, once, when a booking begins: another request's whole booking, made
// between the first request's read of the database and its step in the store.
type raceStore struct {
	sale.Store
	ran    atomic.Bool // before ran (it begins a booking itself: not a sync.Once, which it would re-enter)
	before func()
}

func (s *raceStore) BeginBooking(ctx context.Context, ticket queue.TicketRef, holdID string, grace time.Duration) (sale.Hold, error) {
	if s.ran.CompareAndSwap(false, true) {
		s.before()
	}
	return s.Store.BeginBooking(ctx, ticket, holdID, grace)
}

// TestRetryDuringBooking: the same booking sent twice at once (a client retrying on another
// instance after a timeout): the second one read no booking in the database, and by the time
// it asked the store the first had booked, taken the hold and ended the session. It gets the
// first one's booking (200, replayed), not 404 hold_not_found; with another key, 409
// already_booked. Found by a helper racing retries over two instances (1 pair in 20 got 404).
func TestRetryDuringBooking(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			for _, key := range []string{"same", "other"} {
				var first booking.BookResult
				var firstErr error
				var r *rig
				race := &raceStore{}
				r = newRig(t, backend, withConfig(func(c *booking.Config) { race.Store = c.Store; c.Store = race }))
				r.putEvent(t, "retry", 1, seatNames(2))
				a := r.admitted(t, "retry")
				h, err := r.svc.Hold(ctx, booking.HoldRequest{Ticket: a.TicketRef, Seats: []string{"A-001"}})
				require.NoError(t, err)
				race.before = func() { first, firstErr = r.book(ctx, a, h.ID, "same") }
				second, err := r.book(ctx, a, h.ID, key)
				require.NoError(t, firstErr)
				require.False(t, first.Replayed)
				if key == "other" {
					require.ErrorIs(t, err, booking.ErrAlreadyBooked)
					continue
				}
				require.NoError(t, err, "the retry that met the first booking")
				require.True(t, second.Replayed)
				require.Equal(t, first.Booking.ID, second.Booking.ID)
			}
		})
	}
}

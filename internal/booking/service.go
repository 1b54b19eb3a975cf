// Package booking runs the sale of every instance: holds in the store (fast, atomic, fair),
// bookings confirmed in the SQL database (the final arbiter, whose constraints make a double
// sale impossible even if the store were wrong), then the store told (seats sold, session
// completed, sold out), and recovery: the store's sold state is rebuilt from the database at
// start-up, on demand (`waitroom reconcile`), whenever the store lost an inventory, and
// whenever the database refused a sale the store allowed.
//
// Writes never run on the caller's context: a client that goes away must not cancel a commit
// half way (its outcome would be unknown). Each write runs detached from the caller's
// cancellation, bounded by the caller's deadline or Config.CallTimeout. A booking whose outcome
// is still unknown (the database's answer was lost) is re-read on a fresh context and applied
// to the store, or its event is marked for repair. The sale sync compares the store's sold
// count with the database's for every event each second and repairs a drift that persists.
package booking

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// Errors of the service (besides the sale package's).
var (
	// ErrAlreadyBooked is matched by *AlreadyBookedError.
	ErrAlreadyBooked = errors.New("the ticket has booked already")
	// ErrIdempotencyMismatch: the Idempotency-Key was used for a booking of another hold.
	ErrIdempotencyMismatch = errors.New("idempotency key reused with another hold")
)

// AlreadyBookedError is a second booking by a ticket (without the first one's Idempotency-Key).
type AlreadyBookedError struct{ BookingID string }

func (e *AlreadyBookedError) Error() string { return "the ticket has booked already: " + e.BookingID }

// Is makes errors.Is(err, ErrAlreadyBooked) hold.
func (e *AlreadyBookedError) Is(target error) bool { return target == ErrAlreadyBooked }

// Config configures a Service.
type Config struct {
	DB    *sqlstore.DB // required
	Store sale.Store   // required
	// Events lists the known events (the registry's cache). Required.
	Events func() []event.Event
	// Event returns one event (cache, then SQL). Required.
	Event func(ctx context.Context, id string) (event.Event, error)
	// EnsureLine writes a known event's line to the line store again if it lost it (the
	// registry's Restore), so that a restore can mark it sold out. Optional.
	EnsureLine func(ctx context.Context, id string) error
	// SyncInterval is how often every inventory is written to the store (an unchanged one costs
	// one cheap call) and lost or dirty ones rebuilt. Defaults to 1 s.
	SyncInterval time.Duration
	// Grace is how long a hold is kept at least while its booking is written. Defaults to 30 s.
	Grace time.Duration
	// CallTimeout bounds a write that has no deadline of its caller's, telling the store of a
	// booking, and each attempt to re-read a booking whose outcome is unknown. Defaults to 5 s.
	CallTimeout time.Duration
	// ResolveFor is how long a booking whose outcome is unknown is re-read before its event is
	// left to the sync's repair. Defaults to 30 s.
	ResolveFor time.Duration
	// CommitLag is how long after a booking's database commit the store must count it, or the
	// sync takes the store for behind and repairs it. Defaults to 2 s.
	CommitLag time.Duration
	// Now is the clock of the drift check. Defaults to time.Now.
	Now func() time.Time
	// OnRepair, if set, is called after the sync repaired an event whose store sold count
	// (storeSold) drifted from the database's (dbSold) (metrics).
	OnRepair func(event string, storeSold, dbSold int64)
	// OnWritten, if set, is called once the database confirmed a booking, before the store is
	// told (tests end the caller's context there).
	OnWritten func(b sale.BookingRecord)
	// OnBooked, if set, is called after a booking was made and the store told, with the ticket
	// whose admitted session it completed (the push hub tells the ticket's streams).
	OnBooked func(ref queue.TicketRef)
	Logger   *slog.Logger // defaults to slog.Default()
}

// Service is the sale of one instance. It is safe for concurrent use.
type Service struct {
	cfg Config

	mu    sync.Mutex
	known map[string]bool  // events with an inventory, as of the last sync
	dirty map[string]bool  // events whose store state must be rebuilt
	drift map[string]drift // what the last sync saw of each event's sold counts

	loop      loop.Loop
	bg        context.Context // ends at Stop: the resolvers of unknown outcomes
	bgCancel  context.CancelFunc
	resolvers sync.WaitGroup
}

// drift is what the syncs saw of an event's sold counts (see drifted): the database's of the
// last CommitLag or so, oldest first, and whether the store's was above it at the last sync.
type drift struct {
	counts []dbCount
	ahead  bool
}

type dbCount struct {
	at   time.Time
	sold int64
}

// New returns a Service; Start reconciles and runs its sync loop.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Store == nil || cfg.Events == nil || cfg.Event == nil {
		return nil, errors.New("booking: Config.DB, Store, Events and Event are required")
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.ResolveFor <= 0 {
		cfg.ResolveFor = 30 * time.Second
	}
	if cfg.CommitLag <= 0 {
		cfg.CommitLag = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	s := &Service{cfg: cfg, known: map[string]bool{}, dirty: map[string]bool{}, drift: map[string]drift{}}
	s.bg, s.bgCancel = context.WithCancel(context.Background())
	return s, nil
}

// detach returns a context for a write on behalf of ctx: not cancelled with it (a client that
// went away does not cut a commit), ending at ctx's deadline, or after CallTimeout without one.
func (s *Service) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	d := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(d, dl)
	}
	return context.WithTimeout(d, s.cfg.CallTimeout)
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewID returns prefix + 26 random base32 characters (128 bits).
func NewID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// retryStore runs f, and once more after rebuilding the event's inventory when the store lost
// it or has not restored it yet.
func (s *Service) retryStore(ctx context.Context, event string, f func() error) error {
	err := f()
	if errors.Is(err, sale.ErrNoInventory) || errors.Is(err, sale.ErrNotReady) {
		if _, rerr := s.Reconcile(ctx, event); rerr != nil {
			return rerr
		}
		err = f()
	}
	return err
}

// HoldRequest is the input of Hold.
type HoldRequest struct {
	Ticket   queue.TicketRef
	Seats    []string
	Quantity int64
}

// Hold reserves seats or units for an admitted ticket (see sale.Store.Hold).
func (s *Service) Hold(ctx context.Context, r HoldRequest) (sale.Hold, error) {
	p := sale.HoldParams{Ticket: r.Ticket, HoldID: NewID("hd_"), Seats: r.Seats, Quantity: r.Quantity}
	ctx, cancel := s.detach(ctx)
	defer cancel()
	var h sale.Hold
	err := s.retryStore(ctx, r.Ticket.Event, func() (err error) {
		h, err = s.cfg.Store.Hold(ctx, p)
		return err
	})
	return h, err
}

// Release frees the ticket's hold at once.
func (s *Service) Release(ctx context.Context, ticket queue.TicketRef, holdID string) error {
	return s.retryStore(ctx, ticket.Event, func() error { return s.cfg.Store.Release(ctx, ticket, holdID) })
}

// BookRequest is the input of Book.
type BookRequest struct {
	Ticket queue.TicketRef
	// TicketID is the ticket's id as the API shows it.
	TicketID string
	HoldID   string
	// IdempotencyKey is the client's Idempotency-Key, "" when none.
	IdempotencyKey string
	// TokenHash is the hex SHA-256 of the admission token presented.
	TokenHash string
	// UserKey is the ticket's user (the admission token's usr claim, hex), "" when anonymous;
	// the event's max_per_user caps that user's units (sale.PurchaseLimitError).
	UserKey string
}

// BookResult reports Book.
type BookResult struct {
	Booking sale.BookingRecord
	// Replayed is true when an earlier call with the same Idempotency-Key made the booking.
	Replayed bool
}

// Book confirms a hold: the booking is written to SQL in one transaction (the arbiter), then
// the store records it (seats sold, session COMPLETED, sold out at the last unit). A retry with
// the same Idempotency-Key returns the same booking, also after the session ended.
// Errors: *AlreadyBookedError, ErrIdempotencyMismatch, the store's (sale.ErrHoldNotFound,
// ErrHoldNotYours, ErrHoldExpired, ErrNotAdmitted, ErrNotReady, ...), *sale.ConflictError or
// sale.ErrSoldOut when the database refused, sale.ErrNotForSale, or the database's (among them
// *sale.PurchaseLimitError).
func (s *Service) Book(ctx context.Context, r BookRequest) (BookResult, error) {
	event := r.Ticket.Event
	if prev, err := s.cfg.DB.BookingByTicket(ctx, event, r.TicketID); err == nil {
		return s.replay(ctx, r, prev)
	} else if !errors.Is(err, sale.ErrBookingNotFound) {
		return BookResult{}, err
	}
	wctx, cancel := s.detach(ctx)
	defer cancel()
	var h sale.Hold
	err := s.retryStore(wctx, event, func() (err error) {
		h, err = s.cfg.Store.BeginBooking(wctx, r.Ticket, r.HoldID, s.cfg.Grace)
		return err
	})
	if err != nil {
		// A booking of this ticket made meanwhile (the same request retried on another
		// instance, say) took the hold and ended the session after the read above: the store
		// says the hold is gone or the session ended, but the answer is that booking (the same
		// one on the same Idempotency-Key, 409 already_booked on another).
		if prev, perr := s.cfg.DB.BookingByTicket(ctx, event, r.TicketID); perr == nil {
			return s.replay(ctx, r, prev)
		}
		return BookResult{}, err
	}
	id := NewID("bk_")
	b, created, err := s.cfg.DB.CreateBooking(wctx, sale.BookingRecord{
		ID: id, Event: event, TicketID: r.TicketID, HoldID: r.HoldID, IdempotencyKey: r.IdempotencyKey,
		TokenHash: r.TokenHash, Quantity: h.Quantity, Seats: h.Seats, UserKey: r.UserKey, Epoch: h.Epoch,
	})
	switch {
	case err == nil && !created: // the same ticket booked concurrently
		return s.replay(ctx, r, b)
	case errors.Is(err, sale.ErrSeatsTaken), errors.Is(err, sale.ErrNotEnoughUnits):
		// The store let through what the database refuses: it is behind. Rebuild it now.
		s.cfg.Logger.Warn("the database refused a sale the store allowed; rebuilding the store's sold state",
			"event", event, "err", err)
		s.endBooking(wctx, r)
		c, rerr := s.Reconcile(ctx, event)
		if rerr != nil {
			s.markDirty(event)
		}
		var st *sale.SeatsTakenError
		if errors.As(err, &st) {
			return BookResult{}, &sale.ConflictError{Seats: st.Seats, Available: c.Available()}
		}
		if rerr == nil && c.SoldOut {
			return BookResult{}, sale.ErrSoldOut
		}
		return BookResult{}, &sale.ConflictError{Available: c.Available()}
	case errors.Is(err, sale.ErrNotForSale), errors.Is(err, errEventNotFound), errors.As(err, new(*sale.PurchaseLimitError)),
		errors.Is(err, sale.ErrInvalidHold):
		// Nothing was written: no sale, the event deleted while this was on the way, the
		// user's max_per_user reached (the transaction refused it), or the hold made under a
		// configuration that no longer sells its seats (or its kind). The attempt's grace
		// ends: a ticket that leaves now does not keep its hold for it.
		s.endBooking(wctx, r)
		return BookResult{}, err
	case err != nil:
		// The commit may have happened with its answer lost: find out on a fresh context.
		s.cfg.Logger.Warn("booking outcome unknown; re-reading it", "event", event, "booking", id, "err", err)
		s.resolveLater(r.Ticket, id)
		return BookResult{}, err
	}
	if s.cfg.OnWritten != nil {
		s.cfg.OnWritten(b)
	}
	s.commit(ctx, r.Ticket, b)
	if s.cfg.OnBooked != nil {
		s.cfg.OnBooked(r.Ticket)
	}
	return BookResult{Booking: b}, nil
}

// endBooking tells the store that r's booking attempt ended with nothing written (best
// effort: if the store does not hear it, the grace runs out by itself).
func (s *Service) endBooking(ctx context.Context, r BookRequest) {
	err := s.retryStore(ctx, r.Ticket.Event, func() error { return s.cfg.Store.EndBooking(ctx, r.Ticket, r.HoldID) })
	if err != nil && !errors.Is(err, sale.ErrHoldNotFound) && !errors.Is(err, sale.ErrNoInventory) {
		s.cfg.Logger.Warn("a refused booking's hold keeps its grace", "event", r.Ticket.Event, "hold", r.HoldID, "err", err)
	}
}

// errEventNotFound is event.ErrNotFound (CreateBooking's answer for an event deleted meanwhile),
// named here where Book's event is the id.
var errEventNotFound = event.ErrNotFound

// replay answers a booking request of a ticket that booked already.
func (s *Service) replay(ctx context.Context, r BookRequest, prev sale.BookingRecord) (BookResult, error) {
	if r.IdempotencyKey == "" || r.IdempotencyKey != prev.IdempotencyKey {
		return BookResult{}, &AlreadyBookedError{BookingID: prev.ID}
	}
	if r.HoldID != prev.HoldID {
		return BookResult{}, ErrIdempotencyMismatch
	}
	if prev.Status == sale.BookingConfirmed {
		s.commit(ctx, r.Ticket, prev) // the first call may have died before telling the store
	}
	return BookResult{Booking: prev, Replayed: true}, nil
}

// resolveLater re-reads booking id, whose write's outcome is unknown, in the background until
// the database answers (at most ResolveFor): a confirmed booking is applied to the store at
// once; if the database never answers, the event is marked for the sync's repair.
func (s *Service) resolveLater(ticket queue.TicketRef, id string) {
	s.resolvers.Go(func() {
		ctx, cancel := context.WithTimeout(s.bg, s.cfg.ResolveFor)
		defer cancel()
		retry := time.NewTicker(max(s.cfg.CallTimeout/10, 10*time.Millisecond))
		defer retry.Stop()
		for {
			actx, acancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
			b, err := s.cfg.DB.GetBooking(actx, id)
			acancel()
			switch {
			case err == nil:
				if b.Status == sale.BookingConfirmed {
					s.cfg.Logger.Info("booking of unknown outcome was confirmed; telling the store", "event", ticket.Event, "booking", id)
					s.commit(ctx, ticket, b)
				}
				return
			case errors.Is(err, sale.ErrBookingNotFound):
				s.cfg.Logger.Info("booking of unknown outcome was not written", "event", ticket.Event, "booking", id)
				return
			}
			select {
			case <-ctx.Done():
				s.cfg.Logger.Warn("booking outcome still unknown; the sync will repair the event", "event", ticket.Event, "booking", id, "err", err)
				s.markDirty(ticket.Event)
				return
			case <-retry.C:
			}
		}
	})
}

// commit tells the store about a booking the database confirmed, on a context detached from
// ctx's cancellation and deadline (bounded by CallTimeout). On failure the booking stands (the
// database has it) and the event is rebuilt by the sync loop.
func (s *Service) commit(ctx context.Context, ticket queue.TicketRef, b sale.BookingRecord) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
	defer cancel()
	p := sale.CommitParams{Ticket: ticket, HoldID: b.HoldID, Booking: b.Sold()}
	err := s.retryStore(ctx, ticket.Event, func() error {
		_, err := s.cfg.Store.CommitBooking(ctx, p)
		return err
	})
	if err != nil {
		s.cfg.Logger.Warn("booking confirmed but the store was not told; it will be rebuilt", "booking", b.ID, "err", err)
		s.markDirty(ticket.Event)
	}
}

// Get returns a booking. Errors: sale.ErrBookingNotFound, or the database's.
func (s *Service) Get(ctx context.Context, id string) (sale.BookingRecord, error) {
	return s.cfg.DB.GetBooking(ctx, id)
}

// BookingOf returns the id of the booking a ticket made, "" when none.
func (s *Service) BookingOf(ctx context.Context, event, ticketID string) string {
	b, err := s.cfg.DB.BookingByTicket(ctx, event, ticketID)
	if err != nil {
		return ""
	}
	return b.ID
}

// Sold returns an event's units sold and whether it is sold out, from the database.
// Errors: sale.ErrNotForSale (the event sells nothing), or the database's.
func (s *Service) Sold(ctx context.Context, event string) (sold int64, soldOut bool, err error) {
	capacity, sold, err := s.cfg.DB.Inventory(ctx, event)
	if err != nil {
		return 0, false, err
	}
	return sold, sold >= capacity, nil
}

// Cancel cancels a booking (admin): the database first, then the store gets the units back and
// the sale reopens. Cancelling a cancelled booking returns it unchanged, with changed false (one
// change, one audit entry). Errors: sale.ErrBookingNotFound, or the database's.
func (s *Service) Cancel(ctx context.Context, id string) (b sale.BookingRecord, changed bool, err error) {
	ctx, cancel := s.detach(ctx)
	defer cancel()
	b, changed, err = s.cfg.DB.CancelBooking(ctx, id)
	if err != nil {
		return b, false, err
	}
	err = s.retryStore(ctx, b.Event, func() error {
		_, err := s.cfg.Store.CancelBooking(ctx, b.Event, b.Sold())
		return err
	})
	if err != nil {
		s.cfg.Logger.Warn("booking cancelled but the store was not told; it will be rebuilt", "booking", b.ID, "err", err)
		s.markDirty(b.Event)
	}
	return b, changed, nil
}

// Availability reads an event's inventory from the store (rebuilt first if lost).
func (s *Service) Availability(ctx context.Context, event string) (sale.Availability, error) {
	var a sale.Availability
	err := s.retryStore(ctx, event, func() (err error) {
		a, err = s.cfg.Store.Availability(ctx, event)
		return err
	})
	return a, err
}

func (s *Service) markDirty(event string) {
	s.mu.Lock()
	s.dirty[event] = true
	s.mu.Unlock()
}

// Reconcile rebuilds an event's sale in the store from the database: the line (if lost), the
// inventory, and the sold state (bookings confirmed in SQL), which replaces the store's.
// An event without capacity has its inventory removed. Errors: sale.ErrNotForSale, the event's
// not-found error, or the database's or store's.
func (s *Service) Reconcile(ctx context.Context, event string) (sale.Counts, error) {
	e, err := s.cfg.Event(ctx, event)
	if err != nil {
		return sale.Counts{}, err
	}
	if e.Capacity == 0 {
		return sale.Counts{}, errors.Join(sale.ErrNotForSale, s.cfg.Store.DeleteInventory(ctx, event))
	}
	if s.cfg.EnsureLine != nil {
		if err := s.cfg.EnsureLine(ctx, event); err != nil {
			return sale.Counts{}, fmt.Errorf("line of %s: %w", event, err)
		}
	}
	if _, err := s.cfg.Store.PutInventory(ctx, e.Inventory()); err != nil {
		return sale.Counts{}, fmt.Errorf("inventory of %s: %w", event, err)
	}
	// The cancelled ids are read first: a booking cancelled after this read stays sold in the
	// store until the next reconcile (a lost sale, never a double one); a booking confirmed
	// after the read is kept by the store (see sale.Store.Restore).
	cancelled, err := s.cfg.DB.CancelledBookingIDs(ctx, event)
	if err != nil {
		return sale.Counts{}, err
	}
	sold, err := s.cfg.DB.SoldBookings(ctx, event)
	if err != nil {
		return sale.Counts{}, err
	}
	bs := make([]sale.Booking, len(sold))
	for i, b := range sold {
		bs[i] = b.Sold()
	}
	c, err := s.cfg.Store.Restore(ctx, event, bs, cancelled)
	if err != nil {
		return sale.Counts{}, fmt.Errorf("restore %s: %w", event, err)
	}
	s.mu.Lock()
	s.known[event] = true
	delete(s.dirty, event)
	s.mu.Unlock()
	return c, nil
}

// ReconcileAll rebuilds the sale of every event for sale (start-up, `waitroom reconcile`).
func (s *Service) ReconcileAll(ctx context.Context) (map[string]sale.Counts, error) {
	out := map[string]sale.Counts{}
	var errs []error
	for _, e := range s.cfg.Events() {
		if e.Capacity == 0 {
			continue
		}
		c, err := s.Reconcile(ctx, e.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("event %s: %w", e.ID, err))
			continue
		}
		out[e.ID] = c
	}
	return out, errors.Join(errs...)
}

// Apply writes e's inventory to the store when its configuration was written (PUT or PATCH of
// the event), so that the answer to the write holds for the next hold: a capacity lowered
// from 4 to 3 let two holds of 2 through until the next Sync (at most a second later). An
// inventory the store does not have ready is rebuilt (Reconcile). An event without capacity is
// left to Sync. Errors: the store's or the database's (Sync applies it within a second anyway).
func (s *Service) Apply(ctx context.Context, e event.Event) error {
	if e.Capacity == 0 {
		return nil
	}
	r, err := s.cfg.Store.PutInventory(ctx, e.Inventory())
	if err == nil && r.Ready {
		return nil
	}
	_, err = s.Reconcile(ctx, e.ID)
	return err
}

// Sync writes every inventory to the store (unchanged ones cost one cheap call each), rebuilds
// those the store lost or that a failure marked dirty, and removes those of events gone.
func (s *Service) Sync(ctx context.Context) error {
	var errs []error
	seen := map[string]bool{}
	for _, e := range s.cfg.Events() {
		if e.Capacity == 0 {
			continue
		}
		seen[e.ID] = true
		s.mu.Lock()
		dirty := s.dirty[e.ID]
		s.mu.Unlock()
		r, err := s.cfg.Store.PutInventory(ctx, e.Inventory())
		if err == nil && r.Ready && !dirty {
			if !s.drifted(ctx, e.ID, r.Sold) {
				continue
			}
			if _, err := s.Reconcile(ctx, e.ID); err != nil {
				errs = append(errs, fmt.Errorf("event %s: repair: %w", e.ID, err))
			}
			continue
		}
		if _, err := s.Reconcile(ctx, e.ID); err != nil {
			errs = append(errs, fmt.Errorf("event %s: %w", e.ID, err))
		}
	}
	s.mu.Lock()
	var gone []string
	for id := range s.known {
		if !seen[id] {
			gone = append(gone, id)
			delete(s.known, id)
			delete(s.drift, id)
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		if err := s.cfg.Store.DeleteInventory(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drifted compares the store's sold count of event with the database's (one indexed read) and
// reports true, with a log line and OnRepair, when the store drifted:
//
//   - behind: the store now counts fewer than the database did CommitLag ago or more. A
//     booking is committed to the database first and to the store milliseconds later, so an
//     honest store is never behind an older count (a commit the store never got, or a count
//     lowered from outside, is);
//   - ahead: the store counts more than the database now, at two syncs in a row (the store
//     only ever sells what the database confirmed; a cancellation in flight, database first,
//     makes it ahead for a moment).
//
// A false alarm (a commit slower than CommitLag) costs one rebuild, which is safe at any time.
func (s *Service) drifted(ctx context.Context, event string, storeSold int64) bool {
	_, dbSold, err := s.cfg.DB.Inventory(ctx, event)
	if err != nil {
		return false // no inventory row yet, or the database is down: nothing to compare
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.drift[event]
	ref := -1 // the latest count at least CommitLag old
	for i, c := range d.counts {
		if !c.at.After(now.Add(-s.cfg.CommitLag)) {
			ref = i
		}
	}
	// Behind: the store sells less than the database did CommitLag ago — less, that is, than
	// the least count since then, now's included: a cancellation since lowers what the store
	// must hold (the count at ref alone made every admin cancel a false alarm and a repair).
	behind := false
	if ref >= 0 {
		least := dbSold
		for _, c := range d.counts[ref:] {
			least = min(least, c.sold)
		}
		behind = storeSold < least
	}
	ahead := storeSold > dbSold
	if !behind && (!ahead || !d.ahead) {
		if ref > 0 {
			d.counts = append(d.counts[:0], d.counts[ref:]...)
		}
		d.counts = append(d.counts, dbCount{at: now, sold: dbSold})
		d.ahead = ahead
		s.drift[event] = d
		return false
	}
	delete(s.drift, event) // the rebuild starts the comparison afresh
	s.cfg.Logger.Warn("the store's sold count drifted from the database's; repairing it from the database",
		"event", event, "store_sold", storeSold, "db_sold", dbSold, "behind", behind)
	if s.cfg.OnRepair != nil {
		s.cfg.OnRepair(event, storeSold, dbSold)
	}
	return true
}

// startTimeout bounds Start's rebuild of every event: a database that never answers leaves the
// events not ready (the sync rebuilds them later) instead of hanging the start.
const startTimeout = 30 * time.Second

// Start rebuilds every event's sale from the database, then syncs every SyncInterval until
// Stop or ctx ends. An event whose rebuild failed is logged and left not ready (its holds wait
// for the next successful rebuild), so one broken event does not keep the instance down.
func (s *Service) Start(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, startTimeout)
	_, err := s.ReconcileAll(rctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		s.cfg.Logger.Warn("reconciling the sale at start-up failed for some events", "err", err)
	}
	s.loop.Start(ctx, "sale sync", s.cfg.SyncInterval, s.cfg.Logger, s.Sync)
	return nil
}

// Stop ends the sync loop and the re-reads of unknown outcomes (their events are left to the
// next start's rebuild) and waits for them. Safe before Start and more than once.
func (s *Service) Stop(context.Context) error {
	s.loop.Stop()
	s.bgCancel()
	s.resolvers.Wait()
	return nil
}

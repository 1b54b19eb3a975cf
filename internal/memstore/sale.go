package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

// Sales is the in-process sale.Store of the embedded deployment, on the lines of a Store: a
// hold checks the ticket's admitted session and a booking completes it in the same step, under
// the line's mutex then the inventory's (always in that order). Holds are not saved in the
// snapshot; the sold state is restored from the database at start-up (see package booking).
type Sales struct {
	lines *Store
	mu    sync.Mutex
	invs  map[string]*inventory
}

var _ sale.Store = (*Sales)(nil)

// NewSales returns the sale store of the lines of s, sharing its clock. The lines release the
// hold of a ticket that leaves or whose session ends through it (one Sales per Store).
func NewSales(s *Store) *Sales {
	ss := &Sales{lines: s, invs: make(map[string]*inventory)}
	s.sessionEnded = ss.releaseTicket
	return ss
}

// releaseTicket frees the hold of ticket (gen, n) at once: it left or its session ended. A
// hold being booked is kept until its booking grace ends (its expiry is cut to it). The
// caller holds the line's lock.
func (ss *Sales) releaseTicket(event string, gen uint32, n, nowMS int64) {
	ss.mu.Lock()
	inv := ss.invs[event]
	ss.mu.Unlock()
	if inv == nil {
		return
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	id := inv.byTicket[fmt.Sprintf("%d:%d", gen, n)]
	h := inv.holds[id]
	switch {
	case h == nil:
	case h.pin <= nowMS:
		inv.drop(id)
	case h.exp > h.pin:
		h.exp = h.pin
		inv.expiries.push(h.exp, id)
	}
}

// ticketHold returns hold id of ticket. Errors: sale.ErrHoldNotFound, sale.ErrHoldNotYours.
// The caller holds inv.mu.
func (inv *inventory) ticketHold(ticket queue.TicketRef, id string) (*memHold, error) {
	h := inv.holds[id]
	switch {
	case h == nil:
		return nil, sale.ErrHoldNotFound
	case h.owner != ownerOf(ticket):
		return nil, sale.ErrHoldNotYours
	}
	return h, nil
}

// soldState marks a sold seat in inventory.state (hold ids are never empty).
const soldState = ""

type inventory struct {
	mu       sync.Mutex
	cfg      sale.Inventory
	sig      string
	seats    map[string]bool
	state    map[string]string // seat -> hold id, or soldState
	holds    map[string]*memHold
	byTicket map[string]string  // "gen:number" -> hold id
	expiries expiryHeap[string] // (expiry, hold id), lazily deleted
	bookings map[string]sale.Booking
	sold     int64
	held     int64
	ready    bool
}

type memHold struct {
	owner string // "gen:number"
	exp   int64  // unix ms
	orig  int64  // exp as the hold was made (unix ms): no booking attempt keeps it past orig + grace
	pin   int64  // end of the booking grace (unix ms) once BeginBooking ran, else 0
	qty   int64
	seats []string
}

func ownerOf(ref queue.TicketRef) string { return fmt.Sprintf("%d:%d", ref.Generation, ref.Number) }

func (ss *Sales) inv(event string) (*inventory, error) {
	ss.mu.Lock()
	inv := ss.invs[event]
	ss.mu.Unlock()
	if inv == nil {
		return nil, fmt.Errorf("%w: %s", sale.ErrNoInventory, event)
	}
	return inv, nil
}

// lockBoth locks the event's line (when it exists) and then its inventory; unlock undoes both.
func (ss *Sales) lockBoth(event string) (ln *line, inv *inventory, unlock func(), err error) {
	inv, err = ss.inv(event)
	if err != nil {
		return nil, nil, nil, err
	}
	ln, _ = ss.lines.get(event)
	if ln != nil {
		ln.mu.Lock()
	}
	inv.mu.Lock()
	return ln, inv, func() {
		inv.mu.Unlock()
		if ln != nil {
			ln.mu.Unlock()
		}
	}, nil
}

func (ss *Sales) nowMS() int64 { return ss.lines.now().UnixMilli() }

// PutInventory implements sale.Store.
func (ss *Sales) PutInventory(_ context.Context, cfg sale.Inventory) (sale.PutResult, error) {
	sig := cfg.Signature()
	ss.mu.Lock()
	inv := ss.invs[cfg.Event]
	created := inv == nil
	if created {
		inv = &inventory{state: map[string]string{}, holds: map[string]*memHold{}, byTicket: map[string]string{},
			bookings: map[string]sale.Booking{}}
		ss.invs[cfg.Event] = inv
	}
	ss.mu.Unlock()
	ln, _ := ss.lines.get(cfg.Event) // the line before the inventory, as lockBoth
	if ln != nil {
		ln.mu.Lock()
		defer ln.mu.Unlock()
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !created && (inv.sig == sig || inv.cfg.Epoch == cfg.Epoch && cfg.Version < inv.cfg.Version) {
		return sale.PutResult{Ready: inv.ready, Sold: inv.sold}, nil // unchanged, or an older copy
	}
	inv.cfg, inv.sig = cfg, sig
	inv.seats = make(map[string]bool, len(cfg.Seats))
	for _, s := range cfg.Seats {
		inv.seats[s] = true
	}
	// Holds the new configuration no longer sells are dropped: one on a seat taken off the
	// list, or one of the other kind (seats on an event that now sells a quantity, or the
	// reverse). Booked, such a hold would sell a seat the event no longer has (the database
	// refuses it too: sqlstore's CreateBooking).
	for id, h := range inv.holds {
		if !inv.sells(h) {
			inv.drop(id)
		}
	}
	// A sold state already known follows the new capacity at once, as Restore's does.
	if ln != nil && inv.ready {
		if inv.sold >= cfg.Capacity {
			sellOut(ln)
		} else {
			ln.soldOut = false
		}
	}
	return sale.PutResult{Created: created, Changed: true, Ready: inv.ready, Sold: inv.sold}, nil
}

// DeleteInventory implements sale.Store.
func (ss *Sales) DeleteInventory(_ context.Context, event string) error {
	ss.mu.Lock()
	delete(ss.invs, event)
	ss.mu.Unlock()
	return nil
}

// Restore implements sale.Store.
func (ss *Sales) Restore(_ context.Context, event string, sold []sale.Booking, cancelled []string) (sale.Counts, error) {
	ln, inv, unlock, err := ss.lockBoth(event)
	if err != nil {
		return sale.Counts{}, err
	}
	defer unlock()
	for _, b := range sold {
		inv.bookings[b.ID] = b
	}
	for _, id := range cancelled {
		delete(inv.bookings, id)
	}
	for seat, st := range inv.state {
		if st == soldState {
			delete(inv.state, seat)
		}
	}
	inv.sold = 0
	for _, b := range inv.bookings {
		inv.sold += b.Quantity
		for _, seat := range b.Seats {
			if id, ok := inv.state[seat]; ok && id != soldState {
				inv.drop(id)
			}
			inv.state[seat] = soldState
		}
	}
	inv.ready = true
	var passed int64
	if ln != nil {
		if inv.sold >= inv.cfg.Capacity {
			passed = sellOut(ln)
		} else {
			ln.soldOut = false
		}
	}
	return inv.counts(passed), nil
}

// Hold implements sale.Store.
func (ss *Sales) Hold(_ context.Context, p sale.HoldParams) (sale.Hold, error) {
	p, err := p.Normalize()
	if err != nil {
		return sale.Hold{}, err
	}
	ln, inv, unlock, err := ss.lockBoth(p.Ticket.Event)
	if err != nil {
		return sale.Hold{}, err
	}
	defer unlock()
	now := ss.nowMS()
	switch {
	case !inv.ready:
		return sale.Hold{}, sale.ErrNotReady
	case ln == nil:
		return sale.Hold{}, sale.ErrNotAdmitted
	case ln.gen != p.Ticket.Generation:
		return sale.Hold{}, queue.ErrTicketNotFound
	}
	if exp, ok := ln.active[p.Ticket.Number]; !ok || exp <= now {
		return sale.Hold{}, sale.ErrNotAdmitted
	}
	seated := len(inv.cfg.Seats) > 0
	switch {
	case inv.sold >= inv.cfg.Capacity:
		return sale.Hold{}, sale.ErrSoldOut
	case seated != (len(p.Seats) > 0):
		return sale.Hold{}, &sale.InvalidError{Reason: "a seated event holds seats, a general-admission event a quantity"}
	case p.Quantity > inv.cfg.MaxPerBooking:
		return sale.Hold{}, &sale.InvalidError{Reason: fmt.Sprintf("at most %d per booking", inv.cfg.MaxPerBooking)}
	}
	inv.sweep(now)
	owner := ownerOf(p.Ticket)
	prev := inv.byTicket[owner]
	if seated {
		var unknown, conflicts []string
		for _, s := range p.Seats {
			if !inv.seats[s] {
				unknown = append(unknown, s)
			}
		}
		if len(unknown) > 0 {
			return sale.Hold{}, &sale.InvalidError{Reason: "unknown seats", Seats: unknown}
		}
		for _, s := range p.Seats {
			id, ok := inv.state[s]
			if !ok {
				continue
			}
			if h := inv.holds[id]; id == soldState || (id != prev && h != nil && h.exp > now) {
				conflicts = append(conflicts, s)
			}
		}
		if len(conflicts) > 0 {
			return sale.Hold{}, &sale.ConflictError{Seats: conflicts, Available: inv.counts(0).Available()}
		}
		if prev != "" {
			inv.drop(prev)
		}
		for _, s := range p.Seats {
			if id, ok := inv.state[s]; ok {
				inv.drop(id) // an expired hold of someone else, not yet swept
			}
		}
	} else {
		var mine int64
		if h := inv.holds[prev]; h != nil {
			mine = h.qty
		}
		if avail := inv.cfg.Capacity - inv.sold - inv.held + mine; p.Quantity > avail {
			return sale.Hold{}, &sale.ConflictError{Available: max(0, avail)}
		}
		if prev != "" {
			inv.drop(prev)
		}
	}
	h := &memHold{owner: owner, exp: now + inv.cfg.HoldTTL.Milliseconds(), qty: p.Quantity, seats: p.Seats}
	h.orig = h.exp
	inv.holds[p.HoldID] = h
	inv.byTicket[owner] = p.HoldID
	inv.expiries.push(h.exp, p.HoldID)
	inv.held += h.qty
	for _, s := range p.Seats {
		inv.state[s] = p.HoldID
	}
	ln.activate(p.Ticket.Number, now, now) // a live session: its end is recorded
	return sale.Hold{ID: p.HoldID, Ticket: p.Ticket, Seats: p.Seats, Quantity: p.Quantity, ExpiresAt: queue.FromMS(h.exp)}, nil
}

// Release implements sale.Store.
func (ss *Sales) Release(_ context.Context, ticket queue.TicketRef, holdID string) error {
	inv, err := ss.inv(ticket.Event)
	if err != nil {
		return err
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	h, err := inv.ticketHold(ticket, holdID)
	if err != nil {
		return err
	}
	if now := ss.nowMS(); h.pin > now {
		// Being booked: the database may be confirming it right now, so its units are not
		// handed out meanwhile. It ends with its booking grace instead (and a booking that
		// fails does not bring back the time it had).
		h.orig = min(h.orig, h.pin)
		if h.exp > h.pin {
			h.exp = h.pin
			inv.expiries.push(h.exp, holdID)
		}
		return nil
	}
	inv.drop(holdID)
	return nil
}

// BeginBooking implements sale.Store.
func (ss *Sales) BeginBooking(_ context.Context, ticket queue.TicketRef, holdID string, grace time.Duration) (sale.Hold, error) {
	ln, inv, unlock, err := ss.lockBoth(ticket.Event)
	if err != nil {
		return sale.Hold{}, err
	}
	defer unlock()
	now := ss.nowMS()
	if !inv.ready {
		return sale.Hold{}, sale.ErrNotReady
	}
	h, err := inv.ticketHold(ticket, holdID)
	switch {
	case err != nil:
		return sale.Hold{}, err
	case h.exp <= now:
		inv.drop(holdID)
		return sale.Hold{}, sale.ErrHoldExpired
	}
	for _, s := range h.seats {
		if inv.state[s] != holdID {
			return sale.Hold{}, sale.ErrHoldExpired
		}
	}
	switch {
	case ln == nil:
		return sale.Hold{}, sale.ErrNotAdmitted
	case ln.gen != ticket.Generation:
		return sale.Hold{}, queue.ErrTicketNotFound
	}
	if exp, ok := ln.active[ticket.Number]; !ok || exp <= now {
		return sale.Hold{}, sale.ErrNotAdmitted
	}
	// The grace runs from this attempt, but no attempt keeps the hold past its own time plus
	// one grace: failing bookings retried cannot keep it for the whole session.
	h.pin = min(now, h.orig) + grace.Milliseconds()
	if pinned := h.pin; pinned > h.exp {
		h.exp = pinned
		inv.expiries.push(h.exp, holdID)
	}
	return sale.Hold{ID: holdID, Ticket: ticket, Seats: slices.Clone(h.seats), Quantity: h.qty, ExpiresAt: queue.FromMS(h.exp),
		Epoch: inv.cfg.Epoch}, nil
}

// EndBooking implements sale.Store.
func (ss *Sales) EndBooking(_ context.Context, ticket queue.TicketRef, holdID string) error {
	ln, inv, unlock, err := ss.lockBoth(ticket.Event)
	if err != nil {
		return err
	}
	defer unlock()
	now := ss.nowMS()
	h, err := inv.ticketHold(ticket, holdID)
	if err != nil {
		return err
	}
	h.pin = 0
	live := false
	if ln != nil && ln.gen == ticket.Generation {
		exp, ok := ln.active[ticket.Number]
		live = ok && exp > now
	}
	if !live || min(h.orig, h.exp) <= now {
		inv.drop(holdID)
		return nil
	}
	if h.orig < h.exp {
		h.exp = h.orig
		inv.expiries.push(h.exp, holdID)
	}
	return nil
}

// CommitBooking implements sale.Store.
func (ss *Sales) CommitBooking(_ context.Context, p sale.CommitParams) (sale.Counts, error) {
	ln, inv, unlock, err := ss.lockBoth(p.Ticket.Event)
	if err != nil {
		return sale.Counts{}, err
	}
	defer unlock()
	if _, done := inv.bookings[p.Booking.ID]; done {
		if ln != nil {
			completeTicket(ln, p.Ticket)
		}
		return inv.counts(0), nil
	}
	inv.bookings[p.Booking.ID] = p.Booking
	if h := inv.holds[p.HoldID]; h != nil && h.owner == ownerOf(p.Ticket) {
		inv.drop(p.HoldID)
	}
	if other := inv.byTicket[ownerOf(p.Ticket)]; other != "" {
		inv.drop(other) // made while this booking ran: it ends with the session (a ticket books once)
	}
	for _, s := range p.Booking.Seats {
		if id, ok := inv.state[s]; ok && id != soldState {
			inv.drop(id)
		}
		inv.state[s] = soldState
	}
	inv.sold += p.Booking.Quantity
	var passed int64
	if ln != nil {
		completeTicket(ln, p.Ticket)
		if inv.sold >= inv.cfg.Capacity {
			passed = sellOut(ln)
		}
	}
	return inv.counts(passed), nil
}

// CancelBooking implements sale.Store.
func (ss *Sales) CancelBooking(_ context.Context, event string, b sale.Booking) (sale.Counts, error) {
	ln, inv, unlock, err := ss.lockBoth(event)
	if err != nil {
		return sale.Counts{}, err
	}
	defer unlock()
	if _, ok := inv.bookings[b.ID]; ok {
		delete(inv.bookings, b.ID)
		inv.sold -= b.Quantity
		for _, s := range b.Seats {
			if inv.state[s] == soldState {
				delete(inv.state, s)
			}
		}
	}
	if ln != nil && inv.sold < inv.cfg.Capacity {
		ln.soldOut = false
	}
	return inv.counts(0), nil
}

// Availability implements sale.Store.
func (ss *Sales) Availability(_ context.Context, event string) (sale.Availability, error) {
	inv, err := ss.inv(event)
	if err != nil {
		return sale.Availability{}, err
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !inv.ready {
		return sale.Availability{}, sale.ErrNotReady
	}
	now := ss.nowMS()
	inv.sweep(now)
	a := sale.Availability{Counts: inv.counts(0), Seated: len(inv.cfg.Seats) > 0, Now: queue.FromMS(now)}
	if a.Seated {
		a.Taken = make(map[string]sale.SeatState, len(inv.state))
		for s, id := range inv.state {
			if id == soldState {
				a.Taken[s] = sale.SeatSold
			} else {
				a.Taken[s] = sale.SeatHeld
			}
		}
	}
	return a, nil
}

// Counts implements sale.Store.
func (ss *Sales) Counts(_ context.Context, event string) (sale.Counts, error) {
	inv, err := ss.inv(event)
	if err != nil {
		return sale.Counts{}, err
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !inv.ready {
		return sale.Counts{}, sale.ErrNotReady
	}
	return inv.counts(0), nil
}

// ---- inventory rules (caller holds inv.mu) ----

func (inv *inventory) counts(passed int64) sale.Counts {
	return sale.Counts{Capacity: inv.cfg.Capacity, Sold: inv.sold, Held: inv.held,
		SoldOut: inv.sold >= inv.cfg.Capacity, Passed: passed}
}

// drop removes a hold: its seats still held by it become available and held shrinks.
func (inv *inventory) drop(id string) {
	h := inv.holds[id]
	if h == nil {
		return
	}
	for _, s := range h.seats {
		if inv.state[s] == id {
			delete(inv.state, s)
		}
	}
	inv.held -= h.qty
	delete(inv.holds, id)
	if inv.byTicket[h.owner] == id {
		delete(inv.byTicket, h.owner)
	}
}

// sells reports whether the inventory's configuration sells what h holds: seats it lists on a
// seated event, or a quantity on an event of general admission.
func (inv *inventory) sells(h *memHold) bool {
	if (len(h.seats) > 0) != (len(inv.cfg.Seats) > 0) {
		return false
	}
	for _, s := range h.seats {
		if !inv.seats[s] {
			return false
		}
	}
	return true
}

// sweep drops the holds whose time is up.
func (inv *inventory) sweep(nowMS int64) {
	for e, ok := inv.expiries.popDue(nowMS); ok; e, ok = inv.expiries.popDue(nowMS) {
		if h := inv.holds[e.v]; h != nil && h.exp <= nowMS {
			inv.drop(e.v)
		}
	}
}

// ---- line steps of a sale (caller holds ln.mu) ----

// sellOut marks the line sold out (Store.SetSoldOut, and a sale selling its last unit): every
// waiting ticket is passed over at once. It returns how many were waiting.
func sellOut(ln *line) int64 {
	if ln.soldOut {
		return 0
	}
	ln.soldOut = true
	ln.drawPending = false // nobody waits for the opening now: no draw (see settle)
	passed := ln.waiting()
	if ln.ph > 0 {
		// The pending range (durable.go) reads SOLD_OUT too.
		ln.soldRanges = append(ln.soldRanges, batch{Lo: ln.pl, Hi: ln.ph})
		sort.Slice(ln.soldRanges, func(i, j int) bool { return ln.soldRanges[i].Lo < ln.soldRanges[j].Lo })
		ln.pl, ln.ph, ln.pn = 0, 0, 0
	}
	if ln.seq > ln.serving {
		ln.soldRanges = append(ln.soldRanges, batch{Lo: ln.serving + 1, Hi: ln.seq})
		ln.left = ln.left[:0]
	}
	ln.serving = ln.seq
	ln.passedQ = nil // those owed an admission read SOLD_OUT (status)
	return passed
}

// completeTicket ends the ticket's session with a sale whatever is left of it (the sale is
// confirmed in the database already); a ticket that left stays left.
func completeTicket(ln *line, ref queue.TicketRef) {
	n := ref.Number
	if ref.Generation != ln.gen || n < 1 || n > ln.seq {
		return
	}
	m := ln.mark(n)
	if m == markLeft || m == markCompleted {
		return
	}
	if _, ok := ln.active[n]; ok {
		ln.deactivate(n)
	} else if m == markLive {
		return // never claimed (waiting, or an admission not fetched): a booking needs a claimed session (Hold)
	}
	ln.setMark(n, markCompleted)
}

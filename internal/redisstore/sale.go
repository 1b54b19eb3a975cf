package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

var _ sale.Store = (*Store)(nil)

// parseCounts reads the counts reply of lua/sale_common.lua.
func parseCounts(event string, v []rueidis.RedisMessage, err error) (sale.Counts, error) {
	r := readReply(v, err)
	if code := r.Code(); code < 0 {
		return sale.Counts{}, codeErr(event, code)
	}
	c := sale.Counts{Capacity: r.Int(1), Sold: r.Int(2), Held: r.Int(3), SoldOut: r.Int(4) == 1, Passed: r.Int(5)}
	return c, r.Err()
}

// PutInventory implements sale.Store. An unchanged inventory costs one round trip; a seated
// one that changed (or is new) two, the second carrying the seat list.
func (s *Store) PutInventory(ctx context.Context, inv sale.Inventory) (sale.PutResult, error) {
	seated := "0"
	if len(inv.Seats) > 0 {
		seated = "1"
	}
	args := []string{s.nowArg(), inv.Signature(), strconv.FormatInt(inv.Capacity, 10),
		strconv.FormatInt(inv.MaxPerBooking, 10), strconv.FormatInt(inv.HoldTTL.Milliseconds(), 10), seated,
		strconv.FormatInt(inv.Version, 10), inv.Epoch, "0"}
	r := readReply(inventoryScript.Exec(ctx, s.client, s.saleKeys(inv.Event), args).ToArray())
	if r.Code() == codeSeatsNeeded {
		args[8] = "1"
		args = append(args, inv.Seats...)
		r = readReply(inventoryScript.Exec(ctx, s.client, s.saleKeys(inv.Event), args).ToArray())
	}
	if code := r.Code(); code < 0 && r.Err() == nil {
		return sale.PutResult{}, fmt.Errorf("redisstore: put inventory: %w", codeErr(inv.Event, code))
	}
	res := sale.PutResult{Changed: r.Int(0) == 1, Created: r.Int(1) == 1, Ready: r.Int(2) == 1, Sold: r.Int(3)}
	if err := r.Err(); err != nil {
		return sale.PutResult{}, fmt.Errorf("redisstore: put inventory: %w", err)
	}
	return res, nil
}

// DeleteInventory implements sale.Store.
func (s *Store) DeleteInventory(ctx context.Context, event string) error {
	keys := s.saleKeys(event)[8:]
	if err := s.client.Do(ctx, s.client.B().Del().Key(keys...).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: delete inventory: %w", err)
	}
	return nil
}

// Restore implements sale.Store.
func (s *Store) Restore(ctx context.Context, event string, sold []sale.Booking, cancelled []string) (sale.Counts, error) {
	args := make([]string, 0, 2+3*len(sold)+len(cancelled))
	args = append(args, s.nowArg(), strconv.Itoa(len(sold)))
	for _, b := range sold {
		args = append(args, b.ID, strconv.FormatInt(b.Quantity, 10), strings.Join(b.Seats, ","))
	}
	args = append(args, cancelled...)
	v, err := restoreScript.Exec(ctx, s.client, s.saleKeys(event), args).ToArray()
	c, err := parseCounts(event, v, err)
	if err != nil {
		return c, fmt.Errorf("redisstore: restore: %w", err)
	}
	return c, nil
}

func ticketArgs(now string, ref queue.TicketRef) []string {
	return []string{now, strconv.FormatUint(uint64(ref.Generation), 10), strconv.FormatInt(ref.Number, 10)}
}

// Hold implements sale.Store.
func (s *Store) Hold(ctx context.Context, p sale.HoldParams) (sale.Hold, error) {
	p, err := p.Normalize()
	if err != nil {
		return sale.Hold{}, err
	}
	args := append(ticketArgs(s.nowArg(), p.Ticket), p.HoldID, strconv.FormatInt(p.Quantity, 10))
	args = append(args, p.Seats...)
	r := readReply(holdScript.Exec(ctx, s.client, s.saleKeys(p.Ticket.Event), args).ToArray())
	var h sale.Hold
	switch code := r.Code(); code {
	case 0:
		h = sale.Hold{ID: p.HoldID, Ticket: p.Ticket, Seats: p.Seats, Quantity: p.Quantity, ExpiresAt: queue.FromMS(r.Int(1))}
	case codeTooMany:
		err = &sale.InvalidError{Reason: fmt.Sprintf("at most %d per booking", r.Int(1))}
	case codeUnknownSeats:
		err = &sale.InvalidError{Reason: "unknown seats", Seats: r.Strs(1)}
	case codeConflict:
		err = &sale.ConflictError{Available: r.Int(1), Seats: r.Strs(2)}
	default:
		err = codeErr(p.Ticket.Event, code)
	}
	if rerr := r.Err(); rerr != nil {
		return sale.Hold{}, fmt.Errorf("redisstore: hold: %w", rerr)
	}
	return h, err
}

// Release implements sale.Store.
func (s *Store) Release(ctx context.Context, ticket queue.TicketRef, holdID string) error {
	args := append(ticketArgs(s.nowArg(), ticket), holdID)
	r := readReply(releaseScript.Exec(ctx, s.client, s.saleKeys(ticket.Event), args).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	return codeErr(ticket.Event, code)
}

// BeginBooking implements sale.Store.
func (s *Store) BeginBooking(ctx context.Context, ticket queue.TicketRef, holdID string, grace time.Duration) (sale.Hold, error) {
	args := append(ticketArgs(s.nowArg(), ticket), holdID, strconv.FormatInt(grace.Milliseconds(), 10))
	r := readReply(bookBeginScript.Exec(ctx, s.client, s.saleKeys(ticket.Event), args).ToArray())
	if code := r.Code(); code < 0 && r.Err() == nil {
		return sale.Hold{}, codeErr(ticket.Event, code)
	}
	h := sale.Hold{ID: holdID, Ticket: ticket, ExpiresAt: queue.FromMS(r.Int(1)), Quantity: r.Int(2), Epoch: r.Str(3), Seats: r.Strs(4)}
	if err := r.Err(); err != nil {
		return sale.Hold{}, fmt.Errorf("redisstore: begin booking: %w", err)
	}
	return h, nil
}

// EndBooking implements sale.Store.
func (s *Store) EndBooking(ctx context.Context, ticket queue.TicketRef, holdID string) error {
	r := readReply(bookEndScript.Exec(ctx, s.client, s.saleKeys(ticket.Event), append(ticketArgs(s.nowArg(), ticket), holdID)).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: end booking: %w", err)
	}
	return codeErr(ticket.Event, code) // 0 kept, 1 dropped
}

// CommitBooking implements sale.Store.
func (s *Store) CommitBooking(ctx context.Context, p sale.CommitParams) (sale.Counts, error) {
	args := append(ticketArgs(s.nowArg(), p.Ticket), p.HoldID, p.Booking.ID, strconv.FormatInt(p.Booking.Quantity, 10))
	args = append(args, p.Booking.Seats...)
	v, err := bookCommitScript.Exec(ctx, s.client, s.saleKeys(p.Ticket.Event), args).ToArray()
	c, err := parseCounts(p.Ticket.Event, v, err)
	if err != nil {
		return c, fmt.Errorf("redisstore: commit booking: %w", err)
	}
	return c, nil
}

// CancelBooking implements sale.Store.
func (s *Store) CancelBooking(ctx context.Context, event string, b sale.Booking) (sale.Counts, error) {
	args := append([]string{s.nowArg(), b.ID, strconv.FormatInt(b.Quantity, 10)}, b.Seats...)
	v, err := unsellScript.Exec(ctx, s.client, s.saleKeys(event), args).ToArray()
	c, err := parseCounts(event, v, err)
	if err != nil {
		return c, fmt.Errorf("redisstore: cancel booking: %w", err)
	}
	return c, nil
}

// Counts implements sale.Store: one HMGET of the inventory hash (see lua/sale_common.lua).
func (s *Store) Counts(ctx context.Context, event string) (sale.Counts, error) {
	inv := s.saleKeys(event)[8]
	v, err := s.client.Do(ctx, s.client.B().Hmget().Key(inv).Field("cap", "sold", "held", "rdy").Build()).ToArray()
	if err != nil {
		return sale.Counts{}, fmt.Errorf("redisstore: counts: %w", err)
	}
	if len(v) != 4 {
		return sale.Counts{}, fmt.Errorf("%w: counts of %d values", errShortReply, len(v))
	}
	if v[0].IsNil() {
		return sale.Counts{}, fmt.Errorf("%w: %s", sale.ErrNoInventory, event)
	}
	var n [4]int64
	for i := range v {
		if v[i].IsNil() {
			continue
		}
		if n[i], err = v[i].AsInt64(); err != nil {
			return sale.Counts{}, fmt.Errorf("%w: counts value %d: %v", errShortReply, i, err)
		}
	}
	if n[3] != 1 {
		return sale.Counts{}, sale.ErrNotReady
	}
	return sale.Counts{Capacity: n[0], Sold: n[1], Held: n[2], SoldOut: n[1] >= n[0]}, nil
}

// Availability implements sale.Store.
func (s *Store) Availability(ctx context.Context, event string) (sale.Availability, error) {
	r := readReply(seatsScript.Exec(ctx, s.client, s.saleKeys(event), []string{s.nowArg()}).ToArray())
	if code := r.Code(); code < 0 && r.Err() == nil {
		return sale.Availability{}, codeErr(event, code)
	}
	nowMS, ready := r.Int(1), r.Int(6) == 1
	a := sale.Availability{Now: queue.FromMS(nowMS), Seated: r.Int(5) == 1}
	a.Capacity, a.Sold, a.Held = r.Int(2), r.Int(3), r.Int(4)
	rest := r.Strs(7)
	if err := r.Err(); err != nil {
		return sale.Availability{}, fmt.Errorf("redisstore: availability: %w", err)
	}
	if !ready {
		return sale.Availability{}, sale.ErrNotReady
	}
	a.SoldOut = a.Sold >= a.Capacity
	if a.Seated {
		a.Taken = make(map[string]sale.SeatState, len(rest)/2)
		var held int64
		for i := 0; i+1 < len(rest); i += 2 {
			if rest[i+1] == "S" {
				a.Taken[rest[i]] = sale.SeatSold
				continue
			}
			exp, _, _ := strings.Cut(rest[i+1], ":")
			if ms, _ := strconv.ParseInt(exp, 10, 64); ms > nowMS {
				a.Taken[rest[i]] = sale.SeatHeld
				held++
			}
		}
		// Counted from the seats themselves, so that holds expired but not swept yet are free.
		a.Held = held
	}
	return a, nil
}

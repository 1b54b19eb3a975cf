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

// loadSaleScript returns a sale script: common.lua, then sale_common.lua, then the script.
func loadSaleScript(name string) *rueidis.Lua {
	var b strings.Builder
	for _, f := range []string{"common", "sale_common", name} {
		body, err := luaFS.ReadFile("lua/" + f + ".lua")
		if err != nil {
			panic(err)
		}
		b.Write(body)
		b.WriteByte('\n')
	}
	return rueidis.NewLuaScript(b.String())
}

var (
	inventoryScript  = loadSaleScript("inventory")
	restoreScript    = loadSaleScript("restore")
	holdScript       = loadSaleScript("hold")
	releaseScript    = loadSaleScript("release")
	bookBeginScript  = loadSaleScript("book_begin")
	bookCommitScript = loadSaleScript("book_commit")
	unsellScript     = loadSaleScript("unsell")
	seatsScript      = loadSaleScript("seats")
)

var _ sale.Store = (*Store)(nil)

// saleErr maps the sale scripts' negative codes to sentinel errors (the line's codes included).
func saleErr(event string, code int64) error {
	switch code {
	case -10:
		return fmt.Errorf("%w: %s", sale.ErrNoInventory, event)
	case -11:
		return sale.ErrNotReady
	case -20:
		return sale.ErrHoldNotFound
	case -21:
		return sale.ErrHoldNotYours
	case -22:
		return sale.ErrHoldExpired
	case -15:
		return &sale.InvalidError{Reason: "a seated event holds seats, a general-admission event a quantity"}
	}
	return codeErr(event, code)
}

func int64s(v []rueidis.RedisMessage) []int64 {
	out := make([]int64, len(v))
	for i := range v {
		out[i], _ = v[i].AsInt64()
	}
	return out
}

func strs(v []rueidis.RedisMessage) []string {
	out := make([]string, 0, len(v))
	for i := range v {
		s, _ := v[i].ToString()
		out = append(out, s)
	}
	return out
}

// parseCounts reads the counts reply of lua/sale_common.lua.
func parseCounts(event string, v []rueidis.RedisMessage, err error) (sale.Counts, error) {
	if err != nil {
		return sale.Counts{}, err
	}
	n := int64s(v)
	if n[0] < 0 {
		return sale.Counts{}, saleErr(event, n[0])
	}
	return sale.Counts{Capacity: n[1], Sold: n[2], Held: n[3], SoldOut: n[4] == 1, Passed: n[5]}, nil
}

// PutInventory implements sale.Store. An unchanged inventory costs one round trip; a seated
// one that changed (or is new) two, the second carrying the seat list.
func (s *Store) PutInventory(ctx context.Context, inv sale.Inventory) (sale.PutResult, error) {
	seated := "0"
	if len(inv.Seats) > 0 {
		seated = "1"
	}
	args := []string{s.nowArg(), inv.Signature(), strconv.FormatInt(inv.Capacity, 10),
		strconv.FormatInt(inv.MaxPerBooking, 10), strconv.FormatInt(inv.HoldTTL.Milliseconds(), 10), seated, "0"}
	v, err := inventoryScript.Exec(ctx, s.client, s.saleKeys(inv.Event), args).ToArray()
	if err != nil {
		return sale.PutResult{}, fmt.Errorf("redisstore: put inventory: %w", err)
	}
	if code, _ := v[0].AsInt64(); code == -9 {
		args[6] = "1"
		args = append(args, inv.Seats...)
		if v, err = inventoryScript.Exec(ctx, s.client, s.saleKeys(inv.Event), args).ToArray(); err != nil {
			return sale.PutResult{}, fmt.Errorf("redisstore: put inventory: %w", err)
		}
	}
	n := int64s(v)
	if n[0] < 0 {
		return sale.PutResult{}, fmt.Errorf("redisstore: put inventory: unexpected code %d", n[0])
	}
	return sale.PutResult{Changed: n[0] == 1, Created: n[1] == 1, Ready: n[2] == 1}, nil
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
	v, err := holdScript.Exec(ctx, s.client, s.saleKeys(p.Ticket.Event), args).ToArray()
	if err != nil {
		return sale.Hold{}, fmt.Errorf("redisstore: hold: %w", err)
	}
	code, _ := v[0].AsInt64()
	switch code {
	case 0:
		exp, _ := v[1].AsInt64()
		return sale.Hold{ID: p.HoldID, Ticket: p.Ticket, Seats: p.Seats, Quantity: p.Quantity, ExpiresAt: queue.FromMS(exp)}, nil
	case -12:
		mpb, _ := v[1].AsInt64()
		return sale.Hold{}, &sale.InvalidError{Reason: fmt.Sprintf("at most %d per booking", mpb)}
	case -13:
		return sale.Hold{}, &sale.InvalidError{Reason: "unknown seats", Seats: strs(v[1:])}
	case -14:
		avail, _ := v[1].AsInt64()
		return sale.Hold{}, &sale.ConflictError{Seats: strs(v[2:]), Available: avail}
	}
	return sale.Hold{}, saleErr(p.Ticket.Event, code)
}

// Release implements sale.Store.
func (s *Store) Release(ctx context.Context, ticket queue.TicketRef, holdID string) error {
	args := append(ticketArgs(s.nowArg(), ticket), holdID)
	v, err := releaseScript.Exec(ctx, s.client, s.saleKeys(ticket.Event), args).ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	code, _ := v[0].AsInt64()
	return saleErr(ticket.Event, code)
}

// BeginBooking implements sale.Store.
func (s *Store) BeginBooking(ctx context.Context, ticket queue.TicketRef, holdID string, grace time.Duration) (sale.Hold, error) {
	args := append(ticketArgs(s.nowArg(), ticket), holdID, strconv.FormatInt(grace.Milliseconds(), 10))
	v, err := bookBeginScript.Exec(ctx, s.client, s.saleKeys(ticket.Event), args).ToArray()
	if err != nil {
		return sale.Hold{}, fmt.Errorf("redisstore: begin booking: %w", err)
	}
	code, _ := v[0].AsInt64()
	if code < 0 {
		return sale.Hold{}, saleErr(ticket.Event, code)
	}
	exp, _ := v[1].AsInt64()
	qty, _ := v[2].AsInt64()
	h := sale.Hold{ID: holdID, Ticket: ticket, Quantity: qty, ExpiresAt: queue.FromMS(exp)}
	if len(v) > 3 {
		h.Seats = strs(v[3:])
	}
	return h, nil
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

// Availability implements sale.Store.
func (s *Store) Availability(ctx context.Context, event string) (sale.Availability, error) {
	v, err := seatsScript.Exec(ctx, s.client, s.saleKeys(event), []string{s.nowArg()}).ToArray()
	if err != nil {
		return sale.Availability{}, fmt.Errorf("redisstore: availability: %w", err)
	}
	code, _ := v[0].AsInt64()
	if code < 0 {
		return sale.Availability{}, saleErr(event, code)
	}
	n := int64s(v[:7])
	if n[6] != 1 {
		return sale.Availability{}, sale.ErrNotReady
	}
	a := sale.Availability{Now: queue.FromMS(n[1]), Seated: n[5] == 1}
	a.Capacity, a.Sold, a.Held = n[2], n[3], n[4]
	a.SoldOut = a.Sold >= a.Capacity
	if a.Seated {
		rest := strs(v[7:])
		a.Taken = make(map[string]sale.SeatState, len(rest)/2)
		var held int64
		for i := 0; i+1 < len(rest); i += 2 {
			if rest[i+1] == "S" {
				a.Taken[rest[i]] = sale.SeatSold
				continue
			}
			exp, _, _ := strings.Cut(rest[i+1], ":")
			if ms, _ := strconv.ParseInt(exp, 10, 64); ms > n[1] {
				a.Taken[rest[i]] = sale.SeatHeld
				held++
			}
		}
		// Counted from the seats themselves, so that holds expired but not swept yet are free.
		a.Held = held
	}
	return a, nil
}

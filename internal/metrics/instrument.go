package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

// timer observes a store call's latency under its op (the observers resolved once: the join
// and status paths do not look the label up per call).
type timer struct {
	vec *prometheus.HistogramVec
	ops map[string]prometheus.Observer
}

func newTimer(h *prometheus.HistogramVec, ops ...string) timer {
	t := timer{vec: h, ops: make(map[string]prometheus.Observer, len(ops))}
	for _, op := range ops {
		t.ops[op] = h.WithLabelValues(op)
	}
	return t
}

// since observes the time from start under op; an op not named to newTimer is resolved on the
// spot (a method added to a store without its name costs a lookup, never a panic).
func (t timer) since(op string, start time.Time) {
	o := t.ops[op]
	if o == nil {
		o = t.vec.WithLabelValues(op)
	}
	o.Observe(time.Since(start).Seconds())
}

// InstrumentLine returns s with the latency of every call observed in
// waitroom_store_call_duration_seconds{op}.
func (m *Metrics) InstrumentLine(s queue.Store) queue.Store {
	return timedLine{s, newTimer(m.StoreDuration, "put_event", "delete_event", "stats", "join", "status", "leave",
		"admit", "sold_out", "complete", "extend")}
}

// InstrumentSale is InstrumentLine for the sale store.
func (m *Metrics) InstrumentSale(s sale.Store) sale.Store {
	return timedSale{s, newTimer(m.StoreDuration, "put_inventory", "delete_inventory", "restore", "hold", "release",
		"begin_booking", "end_booking", "commit_booking", "cancel_booking", "availability", "counts")}
}

type timedLine struct {
	s queue.Store
	t timer
}

func (l timedLine) PutEvent(ctx context.Context, cfg queue.EventConfig, gen uint32) (uint32, error) {
	defer l.t.since("put_event", time.Now())
	return l.s.PutEvent(ctx, cfg, gen)
}

func (l timedLine) DeleteEvent(ctx context.Context, event string) error {
	defer l.t.since("delete_event", time.Now())
	return l.s.DeleteEvent(ctx, event)
}

func (l timedLine) Stats(ctx context.Context, event string) (queue.Stats, error) {
	defer l.t.since("stats", time.Now())
	return l.s.Stats(ctx, event)
}

func (l timedLine) View(ctx context.Context, p queue.ViewParams) (queue.View, error) {
	defer l.t.since("stats", time.Now())
	return l.s.View(ctx, p)
}

func (l timedLine) Join(ctx context.Context, p queue.JoinParams) (queue.Ticket, error) {
	defer l.t.since("join", time.Now())
	return l.s.Join(ctx, p)
}

func (l timedLine) Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	defer l.t.since("status", time.Now())
	return l.s.Status(ctx, ref)
}

// Poll is timed as "status": it is the status read of a ticket's holder (with its limit).
func (l timedLine) Poll(ctx context.Context, p queue.PollParams) (queue.Ticket, error) {
	defer l.t.since("status", time.Now())
	return l.s.Poll(ctx, p)
}

func (l timedLine) Leave(ctx context.Context, ref queue.TicketRef) error {
	defer l.t.since("leave", time.Now())
	return l.s.Leave(ctx, ref)
}

func (l timedLine) Admit(ctx context.Context, event string, maxBatch int64) (queue.AdmitResult, error) {
	defer l.t.since("admit", time.Now())
	return l.s.Admit(ctx, event, maxBatch)
}

func (l timedLine) SetSoldOut(ctx context.Context, event string, soldOut bool) (int64, error) {
	defer l.t.since("sold_out", time.Now())
	return l.s.SetSoldOut(ctx, event, soldOut)
}

func (l timedLine) Complete(ctx context.Context, ref queue.TicketRef) error {
	defer l.t.since("complete", time.Now())
	return l.s.Complete(ctx, ref)
}

func (l timedLine) Extend(ctx context.Context, event string, d time.Duration) (int64, error) {
	defer l.t.since("extend", time.Now())
	return l.s.Extend(ctx, event, d)
}

type timedSale struct {
	s sale.Store
	t timer
}

func (x timedSale) PutInventory(ctx context.Context, inv sale.Inventory) (sale.PutResult, error) {
	defer x.t.since("put_inventory", time.Now())
	return x.s.PutInventory(ctx, inv)
}

func (x timedSale) DeleteInventory(ctx context.Context, event string) error {
	defer x.t.since("delete_inventory", time.Now())
	return x.s.DeleteInventory(ctx, event)
}

func (x timedSale) Restore(ctx context.Context, event string, sold []sale.Booking, cancelled []string) (sale.Counts, error) {
	defer x.t.since("restore", time.Now())
	return x.s.Restore(ctx, event, sold, cancelled)
}

func (x timedSale) Hold(ctx context.Context, p sale.HoldParams) (sale.Hold, error) {
	defer x.t.since("hold", time.Now())
	return x.s.Hold(ctx, p)
}

func (x timedSale) Release(ctx context.Context, ticket queue.TicketRef, holdID string) error {
	defer x.t.since("release", time.Now())
	return x.s.Release(ctx, ticket, holdID)
}

func (x timedSale) BeginBooking(ctx context.Context, ticket queue.TicketRef, holdID string, grace time.Duration) (sale.Hold, error) {
	defer x.t.since("begin_booking", time.Now())
	return x.s.BeginBooking(ctx, ticket, holdID, grace)
}

func (x timedSale) EndBooking(ctx context.Context, ticket queue.TicketRef, holdID string) error {
	defer x.t.since("end_booking", time.Now())
	return x.s.EndBooking(ctx, ticket, holdID)
}

func (x timedSale) CommitBooking(ctx context.Context, p sale.CommitParams) (sale.Counts, error) {
	defer x.t.since("commit_booking", time.Now())
	return x.s.CommitBooking(ctx, p)
}

func (x timedSale) CancelBooking(ctx context.Context, event string, b sale.Booking) (sale.Counts, error) {
	defer x.t.since("cancel_booking", time.Now())
	return x.s.CancelBooking(ctx, event, b)
}

func (x timedSale) Availability(ctx context.Context, event string) (sale.Availability, error) {
	defer x.t.since("availability", time.Now())
	return x.s.Availability(ctx, event)
}

func (x timedSale) Counts(ctx context.Context, event string) (sale.Counts, error) {
	defer x.t.since("counts", time.Now())
	return x.s.Counts(ctx, event)
}

package line

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
)

// The instance's view of each line (queue.View), from which Poll answers the status of a
// waiting ticket far from the front without a store call. A view is read from the store at
// most every ViewRefresh per event, by the poll that finds it older (the others meanwhile
// use the one there is), and used for at most ViewMaxAge after the read was sent.
const (
	ViewRefresh = 250 * time.Millisecond
	ViewMaxAge  = time.Second
	// viewStepsPerSecond bounds the admission steps of one instance a second (one every
	// 100 ms, package admission), and viewInstances the instances stepping one line, for
	// the reach of a line without admit_rate.
	viewStepsPerSecond = 10
	viewInstances      = 16
	// viewSlack is places more than the reach that a ticket must have ahead to be answered
	// from the view.
	viewSlack = 64
)

// lineView is what the service keeps of one line.
type lineView struct {
	v       atomic.Pointer[viewRead]
	reading atomic.Bool // a poll is reading a new one
	// left holds the tickets that left through this instance after the view was read
	// (number -> when): they are read from the store until a view read after their leave.
	mu   sync.Mutex
	left map[int64]time.Time
	// polls counts the reads answered from a view since the last read of one, by ticket
	// number, of line generation gen, for the store's count of polls_per_ticket (the next
	// view read carries them).
	polls map[int64]int64
	gen   uint32
}

// viewRead is one read of a line's view.
type viewRead struct {
	queue.View
	sent time.Time // this instance's clock when the read was sent: its age counts from there
}

// lineViewOf returns the service's record of event's view.
func (s *Service) lineViewOf(event string) *lineView {
	if lv, ok := s.views.Load(event); ok {
		return lv.(*lineView)
	}
	lv, _ := s.views.LoadOrStore(event, &lineView{})
	return lv.(*lineView)
}

// reach bounds how many places the serving counter of a line with the limits of v can move
// within d: admissions are bounded by the admit_rate bucket (a tenth of a second's, plus
// one), what late steps may make up (queue.AdmitLateMax of the rate) and the rate over d;
// without a rate by max_active per admission step of every instance. Twice that covers an
// operator raising the limits within the view's age, and the
// tickets ahead that leave meanwhile (which the serving counter skips) up to as many.
func reach(v *queue.View, d time.Duration) int64 {
	var a float64
	if v.AdmitRate > 0 {
		a = v.AdmitRate*(d+queue.AdmitLateMax).Seconds() + v.AdmitRate/10 + 2
	} else {
		a = float64(max(v.MaxActive, 1)) * (d.Seconds()*viewStepsPerSecond + 1) * viewInstances
	}
	return 2*int64(a) + viewSlack
}

// fromView answers a poll of ref from the instance's view of its line, when the view can
// tell: the ticket waits (it is in the view's numbers, did not leave, is not in the draw) in a
// plain line (queue.View.Plain), and has more tickets ahead than the serving counter can pass
// within the view's age (reach): it is then certainly still waiting, and its position is
// the one the store would have given at the view's read (exact when no ticket ahead left
// since). ok false: ask the store. e is the event's cached configuration.
//
// A read of the view counts the reads answered since the last one in the store: refused is
// the time left of a refusal of ref's reads that it brought (its reads on all instances are
// past polls_per_ticket), 0 when none.
func (s *Service) fromView(ctx context.Context, ref queue.TicketRef, e event.Event, key string) (_ queue.Ticket, ok bool, refused time.Duration) {
	lv := s.lineViewOf(ref.Event)
	now := s.cfg.Now()
	v := lv.v.Load()
	if v == nil || now.Sub(v.sent) >= ViewRefresh {
		if lv.reading.CompareAndSwap(false, true) {
			v = s.readView(ctx, lv, e, now)
			lv.reading.Store(false)
			now = s.cfg.Now()
			if left, no := s.refusals.Refused(key); no {
				return queue.Ticket{}, false, left
			}
		}
	}
	closes := e.ClosesAt
	if v == nil {
		return queue.Ticket{}, false, 0
	}
	age := now.Sub(v.sent)
	if age < 0 || age >= ViewMaxAge || !v.Plain || !v.LeftAll || v.Generation != ref.Generation ||
		ref.Number <= v.DrawN || ref.Number > v.LastNumber || (!closes.IsZero() && !now.Add(ViewMaxAge).Before(closes)) {
		return queue.Ticket{}, false, 0
	}
	p := ref.Number // a plain line: the place of a ticket above DrawN is its number
	i, left := slices.BinarySearch(v.Left, p)
	if left {
		return queue.Ticket{}, false, 0 // the store says it left
	}
	pos := p - v.Serving - int64(i) // tickets ahead + 1
	if pos-1 <= reach(&v.View, age+ViewRefresh) || lv.leftHere(ref.Number, v.sent) {
		return queue.Ticket{}, false, 0
	}
	lv.mu.Lock()
	if lv.gen != ref.Generation || lv.polls == nil {
		lv.gen, lv.polls = ref.Generation, make(map[int64]int64)
	}
	lv.polls[ref.Number]++
	lv.mu.Unlock()
	return queue.Ticket{
		TicketRef: ref, Status: queue.StatusQueued, Position: pos, Place: p,
		Waiting: v.Waiting, Serving: v.Serving, Rate: v.Rate, Now: v.Now.Add(age),
	}, true, 0
}

// readView reads e's view into lv and returns it (the one there was when the store does not
// answer), counting in the store the reads answered from the view since the last read: the
// tickets past polls_per_ticket there (on all instances together) are refused here until the
// window ends.
func (s *Service) readView(ctx context.Context, lv *lineView, e event.Event, now time.Time) *viewRead {
	ctx, cancel := context.WithTimeout(ctx, ViewMaxAge)
	defer cancel()
	p := queue.ViewParams{Event: e.ID, Limit: e.Limits.PollsPerTicket, Window: e.Limits.PollWindow}
	lv.mu.Lock()
	polls := lv.polls
	p.Generation = lv.gen
	lv.polls = nil
	lv.mu.Unlock()
	for n, c := range polls {
		p.Polls = append(p.Polls, queue.PollCount{Number: n, Count: c})
	}
	v, err := s.cfg.Store.View(ctx, p)
	if err != nil {
		lv.mu.Lock() // counted at the next read
		if lv.gen == p.Generation {
			if lv.polls == nil {
				lv.polls = polls
			} else {
				for n, c := range polls {
					lv.polls[n] += c
				}
			}
		}
		lv.mu.Unlock()
		return lv.v.Load()
	}
	for _, n := range v.Over {
		s.refusals.Refuse(pollKey(e.ID, p.Generation, n), v.OverFor)
	}
	r := &viewRead{View: v, sent: now}
	lv.v.Store(r)
	lv.mu.Lock()
	for n, at := range lv.left {
		if at.Before(now) {
			delete(lv.left, n)
		}
	}
	lv.mu.Unlock()
	return r
}

// leftHere reports whether ticket n left through this instance at or after the read of its
// view was sent.
func (lv *lineView) leftHere(n int64, sent time.Time) bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	at, ok := lv.left[n]
	return ok && !at.Before(sent)
}

// noteLeave records that ref left through this instance, so that its polls are read from
// the store until a view read after it.
func (s *Service) noteLeave(ref queue.TicketRef) {
	lv, ok := s.views.Load(ref.Event)
	if !ok {
		return
	}
	l := lv.(*lineView)
	l.mu.Lock()
	if l.left == nil {
		l.left = make(map[int64]time.Time)
	}
	l.left[ref.Number] = s.cfg.Now()
	l.mu.Unlock()
}

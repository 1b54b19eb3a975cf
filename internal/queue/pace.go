package queue

import (
	"math"
	"sync"
	"time"
)

// PaceHorizon is how much of a line's current pace a store reserves ahead in SQL: the ceilings
// are kept at least half of it ahead of the counters, so that a flash crowd of thousands of
// joins (or admissions) a second never waits for the database, which a fixed block cannot
// promise (1,024 numbers last 0.3 s at 3,300 joins/s; 32 admissions cap an admission step at 32
// whatever admit_rate asks).
const PaceHorizon = 2 * time.Second

// Caps on the paced reservations: after a loss a store skips at most 1.5 seq reservations of
// void numbers and admits at most 1.5 serving reservations of waiting tickets ahead of the rate
// (never beyond max_active), so both stay bounded whatever a burst measured.
const (
	MaxSeqAhead     = 16 * SeqBlock
	MaxServingAhead = 16384
)

// Pace estimates each line's pace — new numbers and admissions per second — from the
// counters the admission processor reads every step, and says how far ahead of them a store
// keeps its durable ceilings (Ahead). Safe for concurrent use. The zero value is ready.
//
// The estimate follows a rise at once (the rate over the last interval) and falls by a fifth
// per interval, so a burst is covered from the next step on and a lull does not shrink the
// reservations at once. Wall-clock time is used only to measure the rates.
type Pace struct {
	lines sync.Map // event id -> *pace
}

type pace struct {
	mu             sync.Mutex
	at             time.Time
	seq, srv       int64
	seqRate, srvRt float64 // numbers/s, admissions/s
}

// Observe records event's last ticket number seq and serving counter srv at now and returns
// Ahead's figures with the new estimate.
func (p *Pace) Observe(event string, seq, srv int64, now time.Time) (seqAhead, srvAhead int64) {
	v, _ := p.lines.LoadOrStore(event, &pace{})
	l := v.(*pace)
	l.mu.Lock()
	defer l.mu.Unlock()
	if dt := now.Sub(l.at).Seconds(); !l.at.IsZero() && dt >= 0.02 {
		l.seqRate = max(float64(max(seq-l.seq, 0))/dt, l.seqRate*0.8)
		l.srvRt = max(float64(max(srv-l.srv, 0))/dt, l.srvRt*0.8)
		l.at, l.seq, l.srv = now, seq, srv
	} else if l.at.IsZero() {
		l.at, l.seq, l.srv = now, seq, srv
	}
	return aheadOf(l.seqRate, l.srvRt)
}

// Ahead returns how far ahead of its counters event's ceilings are kept (numbers): the ticket
// sequence's at least SeqBlock and PaceHorizon of new numbers at the estimated pace, rounded
// up to a multiple of SeqAlign, at most MaxSeqAhead; the serving counter's at least
// ServingBlock and PaceHorizon of admissions, at most MaxServingAhead.
func (p *Pace) Ahead(event string) (seqAhead, srvAhead int64) {
	v, ok := p.lines.Load(event)
	if !ok {
		return aheadOf(0, 0)
	}
	l := v.(*pace)
	l.mu.Lock()
	defer l.mu.Unlock()
	return aheadOf(l.seqRate, l.srvRt)
}

func aheadOf(seqRate, srvRate float64) (int64, int64) {
	h := PaceHorizon.Seconds()
	seq := int64(math.Ceil(min(seqRate*h, MaxSeqAhead)/SeqAlign)) * SeqAlign
	srv := int64(math.Ceil(min(srvRate*h, MaxServingAhead)))
	return min(max(seq, SeqBlock), MaxSeqAhead), min(max(srv, ServingBlock), MaxServingAhead)
}

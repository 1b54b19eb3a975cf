package queue

import (
	"math"
	"sync"
	"time"
)

// PaceHorizon is how much of a line's current pace a store reserves ahead in SQL: the seq
// ceiling is kept at least half of it ahead of the last number, so that a flash crowd of
// thousands of joins a second never waits for the database, which a fixed block cannot promise
// (1,024 numbers last 0.3 s at 3,300 joins/s). The serving ceiling is not reserved ahead: an
// admission step raises it to exactly what it admits (docs/durability.md).
const PaceHorizon = 2 * time.Second

// MaxSeqAhead caps the paced reservation: after a loss a store skips at most 1.5 reservations
// of void numbers, whatever a burst measured.
const MaxSeqAhead = 16 * SeqBlock

// Pace estimates each line's pace — new numbers per second — from the last number the
// admission processor reads every step, and says how far ahead of it a store keeps its
// durable seq ceiling (Ahead). Safe for concurrent use. The zero value is ready.
//
// The estimate follows a rise at once (the rate over the last interval) and falls by a fifth
// per interval, so a burst is covered from the next step on and a lull does not shrink the
// reservation at once. Wall-clock time is used only to measure the rate.
type Pace struct {
	lines sync.Map // event id -> *pace
}

type pace struct {
	mu      sync.Mutex
	at      time.Time
	seq     int64
	seqRate float64 // numbers/s
}

// Observe records event's last ticket number seq at now and returns Ahead's figure with the
// new estimate.
func (p *Pace) Observe(event string, seq int64, now time.Time) (seqAhead int64) {
	v, _ := p.lines.LoadOrStore(event, &pace{})
	l := v.(*pace)
	l.mu.Lock()
	defer l.mu.Unlock()
	if dt := now.Sub(l.at).Seconds(); !l.at.IsZero() && dt >= 0.02 {
		l.seqRate = max(float64(max(seq-l.seq, 0))/dt, l.seqRate*0.8)
		l.at, l.seq = now, seq
	} else if l.at.IsZero() {
		l.at, l.seq = now, seq
	}
	return aheadOf(l.seqRate)
}

// Ahead returns how far ahead of its last number event's seq ceiling is kept (numbers): at
// least SeqBlock and PaceHorizon of new numbers at the estimated pace, rounded up to a
// multiple of SeqAlign, at most MaxSeqAhead.
func (p *Pace) Ahead(event string) (seqAhead int64) {
	v, ok := p.lines.Load(event)
	if !ok {
		return aheadOf(0)
	}
	l := v.(*pace)
	l.mu.Lock()
	defer l.mu.Unlock()
	return aheadOf(l.seqRate)
}

func aheadOf(seqRate float64) int64 {
	seq := int64(math.Ceil(min(seqRate*PaceHorizon.Seconds(), MaxSeqAhead)/SeqAlign)) * SeqAlign
	return min(max(seq, SeqBlock), MaxSeqAhead)
}

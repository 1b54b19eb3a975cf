package event

import (
	"math"
	"time"

	"github.com/waitroom/waitroom/internal/queue"
)

// ETARate is the admission rate an ETA assumes (per second): measured, the recent measured
// rate (queue.Stats.Rate; 0: none yet, the room has not turned over), or AdmitRate when set
// and nothing is measured; but never below the turnover of a full house (MaxActive sessions
// each ending within the session TTL: a line that is stuck only because nobody leaves still
// moves that fast once sessions expire) and never above AdmitRate (when set). Call it on
// WithDefaults' result.
func (e Event) ETARate(measured float64) float64 {
	r := measured
	if r <= 0 && e.AdmitRate > 0 {
		r = e.AdmitRate
	}
	if e.SessionTTL > 0 {
		r = max(r, e.turnover())
	}
	if e.AdmitRate > 0 {
		r = min(r, e.AdmitRate)
	}
	return r
}

// turnover is a full house's: MaxActive sessions each ending within the session TTL (/s).
func (e Event) turnover() float64 { return float64(e.MaxActive) / e.SessionTTL.Seconds() }

// ETA is the wait of a ticket at position (1-based) in seconds, or -1 when it cannot be told
// (no rate, not waiting, or the line is paused: nobody can say when the operator resumes it):
// position / ETARate(measured), rounded up, plus the time until OpensAt when now is before it
// (the pre-queue waits for the opening). Until the room turns over (measured 0) with AdmitRate
// set, the room's free slots fill at AdmitRate and the rest wait for its turnover: the first
// MaxActive - serving (the line's admissions so far: serving counts them, and the tickets
// passed over) at AdmitRate, the others at the turnover (helper-83: a room of 2 with
// admit_rate set told the third in line 1 s for a wait of ~150 s). The HTTP status, the gate,
// the push messages and the console's forecast all tell this figure.
func (e Event) ETA(position, serving int64, measured float64, now time.Time) int64 {
	if e.Paused {
		return -1
	}
	rate := e.ETARate(measured)
	if position <= 0 || rate <= 0 || math.IsNaN(rate) {
		return -1
	}
	eta := math.Ceil(float64(position) / rate)
	if measured <= 0 && e.AdmitRate > 0 && e.SessionTTL > 0 {
		fast := min(position, max(0, e.MaxActive-serving))
		slow := min(e.AdmitRate, e.turnover())
		eta = math.Ceil(float64(fast)/e.AdmitRate + float64(position-fast)/slow)
	}
	if !e.OpensAt.IsZero() && e.OpensAt.After(now) {
		eta += math.Ceil(e.OpensAt.Sub(now).Seconds())
	}
	if eta > math.MaxInt32 || math.IsNaN(eta) {
		eta = math.MaxInt32 // about 68 years: no overflow however small the rate
	}
	return int64(eta)
}

// PollAfter says how long the holder of ticket t should wait before asking again (s), eta
// being t's ETA (-1 unknown): position/200 s (rounded up), but no more than half its ETA (so
// that an admission is picked up soon after it happens and the slot is not held idle), between
// 1 s and 30 s, and never more than a third of the claim TTL so nobody loses an admission by
// polling too late. A
// line of 100,000 then costs at most about 200·(1+ln 30) + 100,000/30 ≈ 4,000 polls per second,
// whatever its admit_rate. A ticket of a pre-queue whose draw is pending (position 0) is paced
// as the last of the line. An admitted ticket polls every third of its session's time left
// (1..30 s); a ticket in a final state, never (0). The API's poll_after_s, the gate's
// Retry-After and the push messages all tell this figure.
func (e Event) PollAfter(t queue.Ticket, eta int64) int64 {
	if t.Status == queue.StatusAdmitted {
		left := t.AdmittedUntil.Sub(t.Now).Seconds() / 3
		return int64(math.Max(1, math.Min(30, left)))
	}
	if t.Status != queue.StatusQueued {
		return 0
	}
	pos := t.Position
	if pos == 0 {
		pos = t.Waiting
	}
	p := math.Ceil(float64(pos) / 200)
	if eta >= 0 && float64(eta)/2 < p {
		p = math.Floor(float64(eta) / 2)
	}
	ceiling := math.Min(30, math.Floor(e.ClaimTTL.Seconds()/3))
	return int64(math.Max(1, math.Min(ceiling, p)))
}

// TicketETA is the ETA of ticket t (s, ETA's figure), -1 when it has none: a ticket that does
// not wait.
func (e Event) TicketETA(t queue.Ticket) int64 {
	if t.Status != queue.StatusQueued {
		return -1
	}
	return e.ETA(t.Position, t.Serving, t.Rate, t.Now)
}

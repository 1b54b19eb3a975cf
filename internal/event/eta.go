package event

import (
	"math"
	"time"
)

// ETARate is the admission rate an ETA assumes (per second): the recent measured rate, but
// never below the turnover of a full house (MaxActive sessions each ending within the session
// TTL: a line that is stuck only because nobody leaves still moves that fast once sessions
// expire) and never above AdmitRate (when set). Call it on WithDefaults' result.
func (e Event) ETARate(measured float64) float64 {
	r := measured
	if e.SessionTTL > 0 {
		r = max(r, float64(e.MaxActive)/e.SessionTTL.Seconds())
	}
	if e.AdmitRate > 0 {
		r = min(r, e.AdmitRate)
	}
	return r
}

// ETA is the wait of a ticket at position (1-based) in seconds, or -1 when it cannot be told
// (no rate, not waiting): position / ETARate(measured), rounded up, plus the time until
// OpensAt when now is before it (the pre-queue waits for the opening). The HTTP status and the
// push messages both tell this figure.
func (e Event) ETA(position int64, measured float64, now time.Time) int64 {
	rate := e.ETARate(measured)
	if position <= 0 || rate <= 0 || math.IsNaN(rate) {
		return -1
	}
	eta := math.Ceil(float64(position) / rate)
	if !e.OpensAt.IsZero() && e.OpensAt.After(now) {
		eta += math.Ceil(e.OpensAt.Sub(now).Seconds())
	}
	if eta > math.MaxInt32 {
		eta = math.MaxInt32 // about 68 years: no overflow however small the rate
	}
	return int64(eta)
}

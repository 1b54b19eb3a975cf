package history

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Waits is a histogram of times in line, measured: each admission's wait as the recorder
// observes it for waitroom_time_in_queue_seconds (an admission at once waited 0). Bucket i
// holds the waits in [WaitBound(i-1), WaitBound(i)) (bucket 0: under WaitBound(0)); the map
// holds only the buckets counted. Its counts are running totals when read from the shared
// counters (LifeSeries), and a difference of two of them is the histogram of what happened
// in between (Sub).
type Waits map[int]int64

// WaitBuckets is the number of buckets: their bounds grow by 2^(1/16) (about 4.4 %) from
// 100 ms, so that a percentile read inside a bucket is off by at most that, and by about half
// of it on average, up to WaitBound(WaitBuckets-1), a little over a day; longer waits fall in
// the last bucket. A wait under 100 ms (an admission at a join: 0) is in bucket 0.
const WaitBuckets = 320

// bucketsPerDoubling is how many buckets double a wait.
const bucketsPerDoubling = 16

// WaitBound is the upper bound of bucket i.
func WaitBound(i int) time.Duration {
	return time.Duration(math.Round(100 * math.Pow(2, float64(i)/bucketsPerDoubling) * float64(time.Millisecond)))
}

// WaitBucket is the bucket of wait d.
func WaitBucket(d time.Duration) int {
	if d < WaitBound(0) {
		return 0
	}
	// The first bound above d, from the closed form, corrected for rounding.
	i := int(math.Floor(bucketsPerDoubling*math.Log2(float64(d)/float64(100*time.Millisecond)))) + 1
	i = min(max(i, 1), WaitBuckets-1)
	for i > 1 && d < WaitBound(i-1) {
		i--
	}
	for i < WaitBuckets-1 && d >= WaitBound(i) {
		i++
	}
	return i
}

// Count is the number of waits.
func (w Waits) Count() int64 {
	var n int64
	for _, c := range w {
		n += c
	}
	return n
}

// Sub is w minus earlier, the waits counted in between (a bucket that fell, counters that
// expired and started again, counts from 0: the bucket's own count).
func (w Waits) Sub(earlier Waits) Waits {
	out := Waits{}
	for i, c := range w {
		d := c - earlier[i]
		if d < 0 {
			d = c
		}
		if d > 0 {
			out[i] = d
		}
	}
	return out
}

// Add adds other's counts to w.
func (w Waits) Add(other Waits) {
	for i, c := range other {
		w[i] += c
	}
}

// Quantile is the wait below which a fraction q (0..1) of the waits fall: the wait of rank
// q x count, found in its bucket and read between the bucket's bounds as if the bucket's c
// waits stood at the middles of c equal parts of it (bucket 0 from 0). ok is false without
// waits.
func (w Waits) Quantile(q float64) (time.Duration, bool) {
	n := w.Count()
	if n == 0 {
		return 0, false
	}
	rank := q * float64(n)
	keys := slices.Sorted(func(yield func(int) bool) {
		for k := range w {
			if !yield(k) {
				return
			}
		}
	})
	var below float64
	for _, i := range keys {
		c := float64(w[i])
		if c <= 0 {
			continue
		}
		if below+c >= rank {
			lo := time.Duration(0)
			if i > 0 {
				lo = WaitBound(i - 1)
			}
			hi := WaitBound(i)
			frac := min(1, max(0, (rank-below-0.5)/c))
			return lo + time.Duration(frac*float64(hi-lo)), true
		}
		below += c
	}
	return WaitBound(keys[len(keys)-1]), true
}

// waitCounter names the buckets among a series' counters ("w7": bucket 7).
const waitCounter = "w"

// WaitsOf reads the waits among counters (a LifeSeries' counters).
func WaitsOf(counters map[string]int64) Waits {
	w := Waits{}
	for k, v := range counters {
		if !strings.HasPrefix(k, waitCounter) || v <= 0 {
			continue
		}
		if i, err := strconv.Atoi(k[len(waitCounter):]); err == nil && i >= 0 && i < WaitBuckets {
			w[i] += v
		}
	}
	return w
}

// Counters are w as counter deltas (LifeSeries).
func (w Waits) Counters(into map[string]int64) {
	for i, c := range w {
		if c > 0 {
			into[waitCounter+strconv.Itoa(i)] += c
		}
	}
}

// Encode writes w as "i:count" pairs in bucket order, comma-separated ("" when empty): the
// form kept beside the long history's rows.
func (w Waits) Encode() string {
	keys := slices.Sorted(func(yield func(int) bool) {
		for k, c := range w {
			if c > 0 && !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	for j, i := range keys {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(w[i], 10))
	}
	return b.String()
}

// DecodeWaits reads Encode's form; pairs it cannot read are skipped.
func DecodeWaits(s string) Waits {
	w := Waits{}
	for _, p := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(p, ":")
		if !ok {
			continue
		}
		i, err1 := strconv.Atoi(k)
		c, err2 := strconv.ParseInt(v, 10, 64)
		if err1 == nil && err2 == nil && i >= 0 && i < WaitBuckets && c > 0 {
			w[i] += c
		}
	}
	return w
}

// The kinds of refusal an operator reads as bots (or people) kept out, each a group of the
// line's problem codes (line.Problems): RefusalKind maps a code to its kind.
const (
	RefusedRateLimit = "rate_limit"       // rate_limited: joins, polls or challenges per client, tickets_per_client
	RefusedChallenge = "challenge"        // challenge_required, challenge_failed
	RefusedIdentity  = "identity"         // invalid_identity, identity_required, admin_key_required (user_id without the key)
	RefusedShared    = "shared_admission" // admission_shared: one admission used from too many addresses
)

// RefusalKinds are the kinds, in the order they are shown.
var RefusalKinds = []string{RefusedRateLimit, RefusedChallenge, RefusedIdentity, RefusedShared}

// RefusalKind is the kind of a problem code, ok false for a code that is no refusal of the
// line's rules.
func RefusalKind(code string) (string, bool) {
	switch code {
	case "rate_limited":
		return RefusedRateLimit, true
	case "challenge_required", "challenge_failed":
		return RefusedChallenge, true
	case "invalid_identity", "identity_required", "admin_key_required":
		return RefusedIdentity, true
	case "admission_shared":
		return RefusedShared, true
	}
	return "", false
}

// RefusalCounter is the counter of a refusal kind among a LifeSeries' counters.
func RefusalCounter(kind string) string { return "r:" + kind }

// LifeSeries names the counters of one life of an event (event.Event.Epoch: an event deleted
// and created again under its id starts a life of its own): its measured waits (Waits) and
// refusals by kind (RefusalCounter), which the instances add up.
func LifeSeries(event, epoch string) string { return "e:" + event + "@" + epoch }

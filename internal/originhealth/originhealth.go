// Package originhealth is what admitted sessions' requests say of an origin's health, as
// admission mode auto reads it (docs/autoadmit.md): a latency histogram, and the one rule of
// how much of it each client and session may make. Both doors that measure an origin use it: the gate's
// reverse proxy (autoadmit.Signals) and the gate middleware's health report (package gate).
//
// The rule (Period.Settle): every admitted visitor's request is measured, but within one period
// (a second) each counts only so much, so that one admitted visitor cannot move the signals for
// everyone (helper-77, 2026-12-07: ~5 requests a second of one session's own 5xx among ~75
// honest ones cut the limit from 30 sessions to 2, and a burst of its fast requests pinned the
// origin's lowest p95 low; helper-80: two sessions of one address did it again, and unbounded
// requests diluted the origin's errors and inflated the sessions' request rate). What counts
// alike is a client (clientaddr.Group: an IPv4 address, an IPv6 /64), whatever number of
// sessions it holds, or each session when all of the period's come from one client (a proxy
// missing from the trusted ones, or one visitor):
//
//   - its errors count up to those of the k-th most erring client, k = 2 + clients/25 (the
//     clients that made requests in the period: 2 up to 24, 3 from 25, 6 from 100), and never
//     more than its requests as counted (below): errors seen by fewer clients are theirs (a
//     path only they call, their requests the origin's own rate limit refuses) as often as the
//     origin's, while an origin that fails shows its errors to many; at a small load one error
//     is over any budget anyway (1 of 25 requests is 4 %);
//   - its latency samples count up to the larger of the median client's requests and 1/25 of
//     the samples the clients make up to that median: every client counts about alike, and one
//     holds under 5 % of the samples (which is what moves a p95) once about 35 clients make
//     requests in the period; a client over its share counts with samples evenly spaced over
//     its requests;
//   - each session's requests (the origin's load, and the error rate's denominator) count up
//     to twice a session's share of samples (as above, over sessions): a burst of one
//     session's neither dilutes the origin's errors nor passes for hundreds of sessions' load.
//
// A few clients acting together still move the signals (helper-81: three addresses' 503s, or
// two with fewer than 25 clients active, cut a limit to its least): docs/autoadmit.md.
//
// The package uses the standard library only (package gate imports it).
package originhealth

import (
	"math"
	"net/netip"
	"slices"
)

// Bounds are the upper bounds (ms) of the latency histogram's buckets: 1 ms growing by 15 %
// per bucket to past a minute, so that a quantile read from them is within 7.5 % of the truth.
// The last bucket (index len(Bounds)) counts everything above.
var Bounds = func() []float64 {
	var b []float64
	for v := 1.0; v < 70_000; v *= 1.15 {
		b = append(b, v)
	}
	return b
}()

// Buckets is the number of the histogram's buckets: len(Bounds)+1.
var Buckets = len(Bounds) + 1

// Bucket returns the index of the bucket of latency ms: the first whose bound is >= ms, or
// len(Bounds) above them all.
func Bucket(ms float64) int {
	if !(ms > 1) { // NaN too
		return 0
	}
	i := int(math.Ceil(math.Log(ms) / math.Log(1.15)))
	// Rounding of the logarithm: step to the first bound >= ms.
	for i > 0 && Bounds[min(i, len(Bounds))-1] >= ms {
		i--
	}
	for i < len(Bounds) && Bounds[i] < ms {
		i++
	}
	return min(i, len(Bounds))
}

// Quantile is the q-quantile (ms) of a histogram over Bounds holding n samples, linear within
// the bucket it falls in.
func Quantile(buckets []int64, n int64, q float64) float64 {
	rank := q * float64(n)
	var seen float64
	for i, c := range buckets {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := 0.0, Bounds[len(Bounds)-1]
			if i > 0 {
				lo = Bounds[min(i, len(Bounds))-1]
			}
			if i < len(Bounds) {
				hi = Bounds[i]
			}
			return lo + (hi-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return Bounds[len(Bounds)-1]
}

// errShareDiv: errors count up to those of the (2 + clients/errShareDiv)-th most erring client.
const errShareDiv = 25

// shareDiv: a client over the median counts at most 1/shareDiv of the clients' samples up to
// the median (4 %: under the 5 % that moves a p95).
const shareDiv = 25

// reqShare: a session's requests count up to reqShare times a session's share of samples.
const reqShare = 2

// Period is one period's requests by session, for Settle. The zero value is empty and ready;
// it is not safe for concurrent use.
type Period struct {
	sessions map[int64]*session
	spare    []*session // emptied sessions, reused
	scratch  []int32
}

// keepSpare is how many emptied sessions a Period keeps for the next period (and how many it
// may hold for its map to be kept too).
const keepSpare = 4096

type session struct {
	client           netip.Prefix
	requests, errors int32
	buckets          []uint8 // the bucket of each request, in order
}

// Add counts one request of session (its ticket number) from client (clientaddr.Group of the
// visitor's address; the zero Prefix when unknown) whose latency fell in bucket (Bucket) and
// that failed when failed (5xx, or no answer).
func (p *Period) Add(sessionID int64, client netip.Prefix, bucket int, failed bool) {
	s := p.sessions[sessionID]
	if s == nil {
		if p.sessions == nil {
			p.sessions = map[int64]*session{}
		}
		if n := len(p.spare); n > 0 {
			s, p.spare = p.spare[n-1], p.spare[:n-1]
		} else {
			s = new(session)
		}
		p.sessions[sessionID] = s
	}
	if s.requests == math.MaxInt32 {
		return // ~2 billion requests of one session in a period: the rest are not counted
	}
	s.client = client // a session's last address stands for it
	s.requests++
	if failed {
		s.errors++
	}
	s.buckets = append(s.buckets, uint8(min(max(bucket, 0), len(Bounds))))
}

// Empty reports whether the period holds no request.
func (p *Period) Empty() bool { return len(p.sessions) == 0 }

// share is the most one unit (a client, or a session) counts of a period, given every unit's
// requests in it (counts, sorted in place): the larger of their (lower) median and 1/shareDiv
// of the requests up to the median.
func share(counts []int32) int64 {
	slices.Sort(counts)
	median := counts[(len(counts)-1)/2]
	var base int64
	for _, c := range counts {
		base += int64(min(c, median))
	}
	return max(int64(median), base/shareDiv)
}

// voter is what counts alike: a client, or a session when the period's sessions all come from
// one client (a proxy not named as trusted, or one visitor).
type voter struct {
	requests, errors int64
	counted          int64 // its sessions' requests as counted (each up to reqCap)
	buckets          []uint8
}

// Settle adds the period's latency samples to buckets (Buckets long) and returns its requests
// and its errors, each bounded by the rule (package doc); then the period is empty again.
func (p *Period) Settle(buckets []int64) (requests, errors int64) {
	held := len(p.sessions)
	if held == 0 {
		return 0, 0
	}
	counts := p.scratch[:0]
	// Requests: each session's up to reqShare times a session's share.
	for _, s := range p.sessions {
		counts = append(counts, s.requests)
	}
	reqCap := reqShare * share(counts)
	var first netip.Prefix
	oneClient, seen := true, false
	for _, s := range p.sessions {
		requests += min(int64(s.requests), reqCap)
		switch {
		case !seen:
			first, seen = s.client, true
		case s.client != first:
			oneClient = false
		}
	}
	var voters []voter
	if !oneClient {
		index := make(map[netip.Prefix]int, len(p.sessions))
		for _, s := range p.sessions {
			i, ok := index[s.client]
			if !ok {
				i = len(voters)
				index[s.client] = i
				voters = append(voters, voter{})
			}
			v := &voters[i]
			v.requests += int64(s.requests)
			v.errors += int64(s.errors)
			v.counted += min(int64(s.requests), reqCap)
			v.buckets = append(v.buckets, s.buckets...)
		}
	} else {
		voters = make([]voter, 0, len(p.sessions))
		for _, s := range p.sessions {
			voters = append(voters, voter{requests: int64(s.requests), errors: int64(s.errors),
				counted: min(int64(s.requests), reqCap), buckets: s.buckets})
		}
	}
	// Errors: each voter's up to the (2 + voters/errShareDiv)-th most erring voter's.
	counts = counts[:0]
	for _, v := range voters {
		counts = append(counts, int32(min(v.errors, math.MaxInt32)))
	}
	slices.Sort(counts)
	var errCap int64
	if k := 2 + len(counts)/errShareDiv; k <= len(counts) {
		errCap = int64(counts[len(counts)-k])
	}
	// Samples: each voter's up to a voter's share, evenly spaced over its requests.
	counts = counts[:0]
	for _, v := range voters {
		counts = append(counts, int32(min(v.requests, math.MaxInt32)))
	}
	limit := share(counts)
	for _, v := range voters {
		errors += min(v.errors, errCap, v.counted) // never more errors than requests counted
		r := int64(len(v.buckets))
		if k := min(r, limit); k == r {
			for _, b := range v.buckets {
				buckets[b]++
			}
		} else {
			for i := range k { // the middles of k equal parts
				buckets[v.buckets[(2*i+1)*r/(2*k)]]++
			}
		}
	}
	for id, s := range p.sessions {
		delete(p.sessions, id)
		s.requests, s.errors, s.buckets = 0, 0, s.buckets[:0]
		if cap(s.buckets) <= 64 && len(p.spare) < keepSpare { // a heavy session's buffer is not kept
			p.spare = append(p.spare, s)
		}
	}
	if held > keepSpare {
		p.sessions = nil // a map does not shrink: a crowd's is not kept
	}
	p.scratch = nil
	if cap(counts) <= keepSpare {
		p.scratch = counts[:0]
	}
	return requests, errors
}

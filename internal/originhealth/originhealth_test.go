package originhealth

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBucketsAndQuantile(t *testing.T) {
	require.LessOrEqual(t, Buckets, 96, "autoadmit keeps a histogram of 96")
	require.Less(t, Buckets, 256, "a bucket is kept in a byte")
	scan := func(ms float64) int { // the definition: the first bound >= ms
		i := 0
		for i < len(Bounds) && Bounds[i] < ms {
			i++
		}
		return i
	}
	r := rand.New(rand.NewPCG(1, 2))
	values := []float64{0, 0.5, 1, 1.1, 7, 100, 499, 500, 501, 69_999, 1e9}
	for range 10_000 {
		values = append(values, math.Exp(r.Float64()*12))
	}
	values = append(values, Bounds...)
	for _, ms := range values {
		require.Equal(t, scan(ms), Bucket(ms), "bucket of %v", ms)
	}
	require.Zero(t, Bucket(math.NaN()))
	require.Zero(t, Bucket(-5))

	b := make([]int64, Buckets)
	for i := range 1000 { // 1..1000 ms: p95 = 950 ms
		b[Bucket(float64(i+1))]++
	}
	require.InDelta(t, 950, Quantile(b, 1000, 0.95), 950*0.075, "within a bucket's width")
}

// settle returns what Settle made of p: requests, errors and the histogram.
func settle(p *Period) (int64, int64, []int64) {
	b := make([]int64, Buckets)
	n, e := p.Settle(b)
	return n, e, b
}

func total(b []int64) (n int64) {
	for _, c := range b {
		n += c
	}
	return n
}

func TestSessionsCountAlike(t *testing.T) {
	var p Period
	require.True(t, p.Empty())
	n, e, b := settle(&p)
	require.Zero(t, n+e+total(b), "an empty period")

	// One session alone: all of its samples (it is the median), none of its errors.
	for i := range 10 {
		p.Add(7, cl(7), Bucket(float64(10+i)), i < 3)
	}
	n, e, b = settle(&p)
	require.Equal(t, int64(10), n)
	require.Zero(t, e, "errors one session alone sees are its own")
	require.Equal(t, int64(10), total(b))
	require.True(t, p.Empty(), "settled: empty again")

	// Sessions of 1, 2, 3, 4 and 100 requests: the (lower) median is 3; each counts up to 3.
	for s, r := range []int{1, 2, 3, 4, 100} {
		for range r {
			p.Add(int64(s), cl(int64(s)), Bucket(50), s == 4)
		}
	}
	n, e, b = settle(&p)
	require.Equal(t, int64(1+2+3+4+6), n, "requests: each session's up to twice the median (3)")
	require.Equal(t, int64(1+2+3+3+3), total(b))
	require.Equal(t, int64(0), e, "the second most errors of a session: 0")

	// Errors: each session's count up to the second most.
	for s, errs := range []int{9, 2, 1, 0} {
		for i := range 10 {
			p.Add(int64(s), cl(int64(s)), 0, i < errs)
		}
	}
	_, e, _ = settle(&p)
	require.Equal(t, int64(2+2+1), e)

	// From 25 sessions on, up to the errors of the (2 + sessions/25)-th most: at 50
	// sessions three acting together are not counted, four are.
	for _, erring := range []int{3, 4} {
		for s := range 50 {
			for i := range 4 {
				p.Add(int64(s), cl(int64(s)), 0, s < erring && i < 2)
			}
		}
		_, e, _ = settle(&p)
		require.Equal(t, map[int]int64{3: 0, 4: 8}[erring], e, "%d sessions erring of 50", erring)
	}

	// A crowd: past 25 sessions alike, a heavy one holds 4 % of the samples, not the median.
	for s := range 5000 {
		for range 3 {
			p.Add(int64(s), cl(int64(s)), Bucket(100), false)
		}
	}
	for range 1000 {
		p.Add(9999, cl(9999), Bucket(10_000), false)
	}
	n, _, b = settle(&p)
	require.Equal(t, int64(16_000), n)
	require.Equal(t, int64(15_000+15_000/25), total(b))
	require.Equal(t, int64(15_000/25), b[Bucket(10_000)])
	require.Nil(t, p.sessions, "a crowd's map is not kept")
	require.Len(t, p.spare, keepSpare)

	// A heavy session's samples are spread over its requests, not its first ones.
	for s := range 4 {
		p.Add(int64(s), cl(int64(s)), Bucket(100), false)
		p.Add(int64(s), cl(int64(s)), Bucket(100), false)
	}
	for i := range 100 {
		p.Add(9, cl(9), Bucket(float64(1+i/50*999)), false) // 50 at 1 ms, then 50 at 1 s
	}
	_, _, b = settle(&p)
	require.Equal(t, int64(1), b[Bucket(1)])
	require.Equal(t, int64(1), b[Bucket(1000)])
}

// cl is session i's client: an address of its own.
func cl(i int64) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
}

// TestClientsCountAlike: what counts alike is a client, whatever number of sessions it holds;
// when every session comes from one client (a proxy not trusted, one visitor), each session.
// A session's requests count up to twice a session's share.
func TestClientsCountAlike(t *testing.T) {
	var p Period
	for s := range int64(30) { // 30 clients of 2 requests
		p.Add(s, cl(s), Bucket(50), false)
		p.Add(s, cl(s), Bucket(50), false)
	}
	for s := range int64(5) { // 5 sessions of one client: 10 errors and 10 slow answers each
		for i := range 20 {
			p.Add(100+s, cl(999), Bucket(5000), i < 10)
		}
	}
	n, e, b := settle(&p)
	require.Zero(t, e, "one client's errors, over five sessions")
	require.Equal(t, int64(60+2), total(b), "one client's samples: a client's share (2)")
	require.Equal(t, int64(60+5*4), n, "each of its sessions' requests: twice a session's share (2)")

	// All from one client (behind a proxy not named as trusted): sessions count alike.
	for s := range int64(30) {
		p.Add(s, cl(1), Bucket(50), s < 3)
		p.Add(s, cl(1), Bucket(50), false)
	}
	n, e, b = settle(&p)
	require.Equal(t, int64(3), e, "errors of three sessions of 30: the 3rd most erring has 1")
	require.Equal(t, int64(60), total(b))
	require.Equal(t, int64(60), n)
}

// TestErrorsNeverOverRequests: a client's errors count up to its requests as counted, so the
// error rate stays a share (helper-81: three addresses sending 100 errors a second each read
// an error rate of 237 %).
func TestErrorsNeverOverRequests(t *testing.T) {
	var p Period
	for s := range int64(30) {
		p.Add(s, cl(s), Bucket(50), false)
		p.Add(s, cl(s), Bucket(50), false)
	}
	for s := range int64(3) { // three clients of 100 errors each
		for range 100 {
			p.Add(100+s, cl(100+s), Bucket(5), true)
		}
	}
	n, e, _ := settle(&p)
	require.Equal(t, int64(60+3*4), n, "each session's requests up to twice a session's share (2)")
	require.Equal(t, int64(3*4), e, "each client's errors up to its requests counted")
}

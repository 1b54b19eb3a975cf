package history

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitBuckets: every wait falls in the bucket whose bounds hold it, bounds rise, and the
// last bucket takes everything longer.
func TestWaitBuckets(t *testing.T) {
	require.Equal(t, 100*time.Millisecond, WaitBound(0))
	require.Equal(t, 200*time.Millisecond, WaitBound(16))
	require.Greater(t, WaitBound(WaitBuckets-1), 24*time.Hour)
	for i := 1; i < WaitBuckets; i++ {
		require.Greater(t, WaitBound(i), WaitBound(i-1))
	}
	require.Equal(t, 0, WaitBucket(0))
	require.Equal(t, 0, WaitBucket(99*time.Millisecond))
	require.Equal(t, 1, WaitBucket(100*time.Millisecond))
	require.Equal(t, WaitBuckets-1, WaitBucket(100*24*time.Hour))
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		d := time.Duration(r.Int64N(int64(30 * time.Hour)))
		i := WaitBucket(d)
		require.Less(t, d, max(WaitBound(i), d+1), "d below its bucket's bound") // the last takes all
		if i < WaitBuckets-1 {
			require.Less(t, d, WaitBound(i))
		}
		if i > 0 {
			require.GreaterOrEqual(t, d, WaitBound(i-1))
		}
	}
}

// TestWaitQuantiles: the percentiles of a histogram are within 2.5 % of the exact ones, whatever
// the spread of the waits; differences of running totals are what happened in between; the
// encodings round-trip.
func TestWaitQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, spread := range []time.Duration{2 * time.Second, time.Minute, 3 * time.Hour} {
		w := Waits{}
		exact := make([]time.Duration, 5000)
		for i := range exact {
			exact[i] = time.Duration(r.ExpFloat64() * float64(spread))
			w[WaitBucket(exact[i])]++
		}
		slices.Sort(exact)
		for _, q := range []float64{0.5, 0.9} {
			got, ok := w.Quantile(q)
			require.True(t, ok)
			want := exact[int(q*float64(len(exact)))]
			require.InEpsilon(t, want.Seconds(), got.Seconds(), 0.025, "p%.0f of waits spread over %s", q*100, spread)
		}
	}
	_, ok := Waits{}.Quantile(0.5)
	require.False(t, ok, "no waits, no percentile")
	zero := Waits{0: 10}
	p, _ := zero.Quantile(0.5)
	require.Less(t, p, 100*time.Millisecond, "admitted at once: under the first bound")

	before := Waits{3: 5, 9: 1}
	after := Waits{3: 7, 9: 1, 12: 4}
	require.Equal(t, Waits{3: 2, 12: 4}, after.Sub(before))
	require.Equal(t, Waits{3: 1}, Waits{3: 1}.Sub(Waits{3: 9}), "a counter that started again counts from 0")
	sum := Waits{1: 1}
	sum.Add(Waits{1: 2, 4: 1})
	require.Equal(t, Waits{1: 3, 4: 1}, sum)
	require.Equal(t, int64(12), after.Count())

	require.Equal(t, "3:7,9:1,12:4", after.Encode())
	require.Equal(t, after, DecodeWaits(after.Encode()))
	require.Equal(t, Waits{2: 1}, DecodeWaits("2:1,x:3,4,999:1,5:-1"))
	c := map[string]int64{"other": 9}
	after.Counters(c)
	require.Equal(t, after, WaitsOf(c))
}

func TestRefusalKinds(t *testing.T) {
	for code, kind := range map[string]string{"rate_limited": RefusedRateLimit, "challenge_failed": RefusedChallenge,
		"challenge_required": RefusedChallenge, "invalid_identity": RefusedIdentity, "identity_required": RefusedIdentity,
		"admin_key_required": RefusedIdentity, "admission_shared": RefusedShared} {
		k, ok := RefusalKind(code)
		require.True(t, ok, code)
		require.Equal(t, kind, k, code)
		require.Contains(t, RefusalKinds, k)
	}
	for _, code := range []string{"event_not_found", "store_unavailable", "sold_out", ""} {
		_, ok := RefusalKind(code)
		require.False(t, ok, code)
	}
}

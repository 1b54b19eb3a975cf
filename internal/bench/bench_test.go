package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/challenge"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		require.Equal(t, c.want, median(c.in))
	}
	require.True(t, math.IsNaN(median(nil)))
	xs := []float64{3, 1, 2}
	median(xs)
	require.Equal(t, []float64{3, 1, 2}, xs, "median does not sort its argument")
}

func TestIQR(t *testing.T) {
	require.Zero(t, iqr([]float64{1, 2, 3}))
	require.Equal(t, 4.0, iqr([]float64{8, 1, 2, 3, 4, 5, 6, 7}))
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -20000: "-20,000"} {
		require.Equal(t, want, thousands(in))
	}
}

func TestRedisBenchmarkOutput(t *testing.T) {
	// redis-benchmark -q rewrites its progress line with \r and ends with the final rate.
	out := "evalsha abc: rps=0.0 (overall: nan) avg_msec=nan\revalsha abc: rps=81234.0 (overall: 80000.1)\r" +
		"evalsha abc 8 k1 k2: 91408.20 requests per second, p50=15.215 msec\n"
	m := rpsPattern.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, m)
	require.Equal(t, "91408.20", m[len(m)-1][1])
	require.True(t, strings.HasPrefix(lastLine([]byte(out)), "evalsha abc 8"))
}

func TestReportCountsNotMet(t *testing.T) {
	var r Report
	r.add("a", Holds, "x")
	r.add("b", NotMet, "y")
	r.add("c", Unavailable, "z")
	r.fail("d", errTest("boom"))
	require.Equal(t, 2, r.NotMet())
	var b strings.Builder
	r.Write(&b)
	require.Contains(t, b.String(), "NOT MET  b")
	require.Contains(t, b.String(), "ERROR    d")
}

type errTest string

func (e errTest) Error() string { return string(e) }

// TestSolvedBodies: the guarded target's joins carry challenges of the event, each solved and
// each different, which the instance's issuer (same key) accepts.
func TestSolvedBodies(t *testing.T) {
	key, err := challenge.DeriveKey("bench-test-token-key-0123")
	require.NoError(t, err)
	is, err := challenge.NewIssuer(challenge.Config{Key: key})
	require.NoError(t, err)
	target := challenge.Target{Event: "guarded", Epoch: "0123456789abcdef", Difficulty: guardedDifficulty}
	bodies, err := solvedBodies(t.Context(), is, target, 20)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, b := range bodies {
		var j struct{ Challenge, Solution string }
		require.NoError(t, json.Unmarshal(b, &j))
		c, err := is.Verify(j.Challenge, j.Solution, target, time.Now())
		require.NoError(t, err)
		require.Equal(t, guardedDifficulty, c.Difficulty)
		require.False(t, seen[c.ID])
		seen[c.ID] = true
	}
}

// TestPairedRatios: the --compare comparison takes each round's ratio and then their median, so
// that one round where the whole machine ran slow moves neither side against the other.
func TestPairedRatios(t *testing.T) {
	us := func(xs ...float64) []time.Duration {
		ds := make([]time.Duration, len(xs))
		for i, x := range xs {
			ds[i] = time.Duration(x * float64(time.Microsecond))
		}
		return ds
	}
	// The machine slowed down in round 3 for both; this build costs 10 % less in every round.
	a := &httpSide{rates: []float64{110, 220, 55}, inst: us(36, 45, 90), redis: us(9, 9, 27)}
	b := &httpSide{rates: []float64{100, 200, 50}, inst: us(40, 50, 100), redis: us(10, 10, 30)}
	got := paired(a, b)
	want := "this build against it round by round: CPU per request x0.90 instance (rounds 0.90, 0.90, 0.90), x0.90 Redis (rounds 0.90, 0.90, 0.90), rate x1.10 (rounds 1.10, 1.10, 1.10)"
	if got != want {
		t.Fatalf("paired:\n got %s\nwant %s", got, want)
	}
}

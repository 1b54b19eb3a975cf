package autoexp

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestControllerFollowsTheOrigin is the short form of the experiment, in the test command: one
// instance, an origin of 100 requests/s the event is not told, a crowd larger than it takes.
// The controller must find most of the capacity, hold the origin's p95 near the target (within
// 1.5 x: it holds at 0.7-1 x the target, and single windows of this shared host cross it, see
// docs/autoadmit.md's figures), follow the capacity down when it is halved, and the visitors
// keep their places in order. Without decreases the p95 runs to seconds and errors; without
// raises the load stays at a few requests a second: either fails it.
// The figures of the issue are the long form's (WAITROOM_AUTO_EXPERIMENT=1, or `waitroom
// auto-experiment`): this one is sized to run in about a minute on a busy machine.
func TestControllerFollowsTheOrigin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an origin, an instance and a crowd for about a minute")
	}
	cfg := Config{Capacities: []int{100}, Settle: 35 * time.Second, Halved: 25 * time.Second, Restored: -1,
		Allowed: 100, Log: testLog{t}}
	r, err := RunCapacity(context.Background(), cfg, 100)
	require.NoError(t, err)
	t.Log(r.Line(500 * time.Millisecond))
	settled := tail(r.Seconds, 35, 10)
	require.GreaterOrEqual(t, mean(settled), 60.0, "the controller found most of the 100 requests/s")
	require.LessOrEqual(t, p95(settled), 750.0, "the origin's p95 near the target once settled")
	halved := tail(r.Seconds, 60, 5)
	require.LessOrEqual(t, p95(halved), 750.0, "back near the target 20 s after the capacity was halved")
	require.LessOrEqual(t, mean(halved), 60.0, "the load follows the halved capacity (50 requests/s)")
	require.Zero(t, r.FIFOViolations, "FIFO")
	require.Zero(t, r.Renumbered, "nobody lost their place")
	require.LessOrEqual(t, r.MaxInside, r.MaxLimit, "never more inside than the highest max_active")
}

// TestExperiment is the long form (about 25 minutes): every capacity on 1 instance, then on 3
// on Redis; it fails when a figure of issue 23 is not met.
func TestExperiment(t *testing.T) {
	if ok, _ := strconv.ParseBool(os.Getenv("WAITROOM_AUTO_EXPERIMENT")); !ok {
		t.Skip("set WAITROOM_AUTO_EXPERIMENT=1 (about 25 minutes)")
	}
	for _, n := range []int{1, 3} {
		args := []string{"--instances", strconv.Itoa(n)}
		require.NoError(t, Command(context.Background(), args, testLog{t}, testLog{t}), "%d instances", n)
	}
}

// tail returns the seconds of (end-n, end].
func tail(s []Second, end, n float64) []Second {
	var out []Second
	for _, x := range s {
		if x.T > end-n && x.T <= end {
			out = append(out, x)
		}
	}
	return out
}

func mean(s []Second) float64 {
	var sum float64
	for _, x := range s {
		sum += x.Load
	}
	return sum / float64(max(len(s), 1))
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}

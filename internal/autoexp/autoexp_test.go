package autoexp

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/syncbuf"
)

// TestControllerFollowsTheOrigin is the short form of the experiment, in the test command: one
// instance, an origin of 100 requests/s the event is not told, a crowd larger than it takes.
// It checks the criteria on one capacity, as the long form computes them (analyse):
// the load settles within ±10 % of the most allowed, and from then on the origin's p95 is under
// the target and its errors within the budget; after the capacity is halved every 3-s window
// of the origin's p95 is back under the target within 20 s and stays there; the visitors keep
// their places in order and never more are inside than the limit. Without decreases the p95
// runs to seconds and errors; without raises the load stays at a few requests a second; a
// controller holding the p95 near the target instead of under it crosses it in some window.
// Under the race detector (make test) the harness itself stalls on a busy 2-core machine, and
// only the looser checks of the controller working at all hold (see raceEnabled below).
// The long form (WAITROOM_AUTO_EXPERIMENT=1, or `waitroom auto-experiment`) has every capacity.
func TestControllerFollowsTheOrigin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an origin, an instance and a crowd for about two minutes")
	}
	const target = 500 * time.Millisecond
	// The first phase is long enough to see the criterion's whole range: the load must settle
	// within 60 s (Result.Holds), and analyse counts it settled only with 5 s of it inside the
	// phase. A 50-s phase failed runs that settled at 46-60 s: the controller's climb from its
	// start to 100 requests/s takes 30-50 s on a 2-core machine, longer while other packages'
	// tests run beside it.
	const settle, halved = 70 * time.Second, 30 * time.Second
	cfg := Config{Capacities: []int{100}, Settle: settle, Halved: halved, Restored: -1,
		Allowed: 100, Target: target, ErrorBudget: 0.01, Log: testLog{t}}
	trace := &syncbuf.Buffer{}
	cfg.Trace = trace
	r, err := RunCapacity(context.Background(), cfg, 100)
	require.NoError(t, err)
	t.Log(r.Line(target))
	lines := strings.Split(strings.TrimSpace(trace.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 60, "a trace line a second (--trace)")
	for _, l := range lines[len(lines)-5:] {
		require.Regexp(t, `^trace t= *\d+\.\d load +\d+ p95 +\d+ \| limit +\d+ active +\d+ waiting +\d+ \| gate p95 .* min +\d+ .*\| \S`, l)
	}
	if raceEnabled {
		// Under the race detector, on a shared 2-core machine, the one process of the harness
		// stalls for whole seconds (the origin's load drops to nothing, the gate measures its
		// own wait: 875 ms against the origin's 347 in one run), and its sessions and origin run
		// as fast as the machine lets them: what the controller then reads is the harness's
		// speed, not the origin's capacity. With helpers loading the machine (load average 6) a
		// run climbed to 24 sessions and 30 requests/s in 70 s, reading the slowed origin's
		// queueing as its knee, and failed the earlier check of 60 requests/s. So here only what
		// does not depend on speed: the controller raises the limit while the origin answers
		// within the objective (below), and the places' invariants after this branch; the
		// criteria are checked without -race (go test ./internal/autoexp/, which the test
		// command runs alone).
		first, top := r.Seconds[0].MaxActive, int64(0)
		for _, s := range tail(r.Seconds, settle.Seconds(), settle.Seconds()) {
			top = max(top, s.MaxActive)
		}
		require.GreaterOrEqual(t, top, 4*max(first, 1), "the controller raised the limit from its start (%d)", first)
	} else {
		require.GreaterOrEqual(t, r.SettleS, 0.0, "the load settled within ±10%% of the 100 requests/s allowed")
		require.LessOrEqual(t, r.SettleS, 60.0, "the load settled within 60 s")
		require.Less(t, r.P95MS, 500.0, "the origin's p95 under the target once settled")
		require.LessOrEqual(t, r.ErrorRate, 0.01, "the origin's errors within the budget once settled")
		require.GreaterOrEqual(t, r.RecoverS, 0.0, "back under the target after the capacity was halved")
		require.LessOrEqual(t, r.RecoverS, 20.0, "back under the target within 20 s of the halving")
		require.LessOrEqual(t, r.HalvedLoad, 55.0, "the load follows the halved capacity (50 requests/s)")
	}
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

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}

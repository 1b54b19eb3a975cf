package autoexp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHoldsJudgesOnlyThePhasesRun: a run without the restore phase (the short test) is not
// judged on getting back up after it, and says it was not run; a run with it that never got
// back up is.
func TestHoldsJudgesOnlyThePhasesRun(t *testing.T) {
	const target = 500 * time.Millisecond
	var r Result
	analyse(&r, nil, nil, nil, target, 0)
	r.SettleS, r.P95MS, r.RecoverS = 30, 350, 9
	require.Empty(t, r.Holds(target))
	require.Contains(t, r.Line(target), "restored: not run")
	require.Contains(t, r.Line(target), "HOLDS")

	r.Allowed = 100
	analyse(&r, nil, nil, []Second{{T: 1, Load: 10}, {T: 2, Load: 10}, {T: 3, Load: 10}, {T: 4, Load: 10}, {T: 5, Load: 10}}, target, 0)
	r.SettleS, r.P95MS, r.RecoverS = 30, 350, 9
	require.Equal(t, []string{"back up -1 s after restoring (want <= 60)"}, r.Holds(target))
}

package line

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
)

// TestReachCoversALateStep: a view answers only tickets the serving counter cannot reach within
// its age, and one admission step may admit the bucket and what late steps could not take
// (queue.AdmitLateMax of admit_rate): a view read just before such a step must not tell a
// ticket it admits that it waits.
func TestReachCoversALateStep(t *testing.T) {
	v := queue.View{AdmitRate: 100}
	step := int64(100/10+1) + int64(queue.AdmitLateMax.Seconds()*100)
	require.GreaterOrEqual(t, reach(&v, 0), step)
}

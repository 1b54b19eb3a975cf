package crowd

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProcShares: the users and the source addresses of --procs are split without overlap
// and without loss.
func TestProcShares(t *testing.T) {
	sum := 0
	for i := range 3 {
		sum += procShare(50_000, 3, i)
	}
	require.Equal(t, 50_000, sum)
	require.Equal(t, 16_667, procShare(50_000, 3, 0))

	p := netip.MustParsePrefix("127.0.1.0/24")
	var got []string
	for i := range 4 {
		s, ok := addrShare(p, 4, i)
		require.True(t, ok)
		got = append(got, s.String())
	}
	require.Equal(t, []string{"127.0.1.0/26", "127.0.1.64/26", "127.0.1.128/26", "127.0.1.192/26"}, got)
	s, ok := addrShare(p, 3, 2)
	require.True(t, ok)
	require.Equal(t, "127.0.1.128/26", s.String(), "three processes take three quarters")
	_, ok = addrShare(netip.MustParsePrefix("127.0.2.1/32"), 2, 1)
	require.False(t, ok, "one address cannot be split in two")
}

// TestMergeReports: the reports of the processes of one run add up; latencies come from their
// merged histograms, not from averaging percentiles; max_active_seen stays a lower bound.
func TestMergeReports(t *testing.T) {
	part := func(n int, lat time.Duration, active int64) Report {
		r := newRunner(Config{Targets: []string{"http://a"}, Event: "e", Users: n, Push: true, Concurrency: 1}.WithDefaults())
		for range n {
			r.joinLatency.record(lat.Microseconds())
			r.pushLatency.record(lat.Microseconds())
			r.admission.record(lat.Milliseconds())
			r.admitted.Add(1)
		}
		r.pushAdmitted.Store(int64(n))
		r.maxActiveSeen.Store(active)
		r.errors["503"] = 2
		rep := r.report()
		rep.Histograms = r.histograms()
		return rep
	}
	rep, err := mergeReports([]Report{part(90, 10*time.Millisecond, 40), part(10, 2*time.Second, 70)})
	require.NoError(t, err)
	require.EqualValues(t, 100, rep.Admitted)
	require.EqualValues(t, 100, rep.PushAdmitted)
	require.EqualValues(t, 4, rep.Errors["503"])
	require.EqualValues(t, 70, rep.MaxActiveSeen, "the largest any process saw")
	require.EqualValues(t, 100, rep.JoinLatencyMS.Count)
	require.InDelta(t, 10, rep.JoinLatencyMS.P50, 0.1, "the median of all 100, not of the medians")
	require.InDelta(t, 2000, rep.JoinLatencyMS.P99, 5)
	require.InDelta(t, 2000, rep.PushLatencyMS.Max, 1)
	require.InDelta(t, 2, rep.TimeToAdmissionS.P99, 0.01)
	require.Zero(t, rep.Lost)

	_, err = mergeReports([]Report{{Users: 1}})
	require.Error(t, err, "a report without histograms is not a --procs process's")
}

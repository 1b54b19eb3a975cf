package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/eventually"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor int64
		base, want  int
	}{
		{8 * mib, 64 * mib, 100, 800},    // small heap: the floor
		{24 * mib, 64 * mib, 100, 267},   // ceil(6400/24)
		{64 * mib, 64 * mib, 100, 100},   // GOGC's growth reaches the floor
		{512 * mib, 64 * mib, 100, 100},  // large heap: GOGC
		{8 * mib, 64 * mib, 400, 800},    // the operator's GOGC is the least percent
		{32 * mib, 64 * mib, 400, 400},   // and wins once it gives more
		{0, 64 * mib, 100, 1600},         // before the first collection: 4 MiB assumed
		{1 << 10, 1 << 40, 100, 100_000}, // bounded
	} {
		require.Equal(t, c.want, Percent(c.live, c.floor, c.base), "live %d floor %d GOGC %d", c.live, c.floor, c.base)
	}
}

// gogc is the percent the runtime runs with (runtime/metrics, not SetGCPercent: reading that
// way would write it).
func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

var sink []byte

// collections allocates n bytes of garbage in 4 KiB pieces and returns how many collections ran
// meanwhile.
func collections(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n / 4096 {
		sink = make([]byte, 4096)
	}
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// TestFloorSpacesCollections: with a small live heap, 256 MiB of garbage under a floor of 64
// MiB takes a handful of collections, against dozens without it; stop gives the runtime its
// GOGC back.
func TestFloorSpacesCollections(t *testing.T) {
	base := gogc()
	runtime.GC()
	without := collections(256 << 20)
	stop := Start(64 << 20)
	require.Greater(t, gogc(), base, "the percent is set at once")
	with := collections(256 << 20)
	t.Logf("collections for 256 MiB of garbage: %d without the floor, %d with it", without, with)
	require.GreaterOrEqual(t, without, uint32(20))
	require.LessOrEqual(t, with, uint32(8), "one collection per 64 MiB, and the first")
	stop()
	require.Equal(t, base, gogc())
	stop() // twice is fine
	require.Equal(t, base, gogc())
}

// TestFloorStepsAsideForABigHeap: once the live heap is large enough that GOGC gives more room
// than the floor, the percent is GOGC's again; when it shrinks, the floor's again. Each change
// is made by the cleanup after a collection, so the tuner must keep re-arming it.
func TestFloorStepsAsideForABigHeap(t *testing.T) {
	base := gogc()
	stop := Start(16 << 20)
	defer stop()
	small := gogc()
	require.Greater(t, small, base)
	big := make([][]byte, 0, 64)
	for range 64 { // 64 MiB kept live, in pieces the collector must mark
		big = append(big, make([]byte, 1<<20))
	}
	for i := range 3 { // three rounds: the tuner has to re-arm after each
		eventually.True(t, 5*time.Second, "GOGC's percent with 64 MiB live", func() bool {
			runtime.GC()
			return gogc() == base
		})
		runtime.KeepAlive(big)
		big = nil
		eventually.True(t, 5*time.Second, "the floor's percent with the heap small again", func() bool {
			runtime.GC()
			return gogc() > base
		})
		if i < 2 {
			for range 64 {
				big = append(big, make([]byte, 1<<20))
			}
		}
	}
}

// TestGOGCOff: an operator's GOGC=off is left alone.
func TestGOGCOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	stop := Start(64 << 20)
	require.Equal(t, int64(-1), int64(debug.SetGCPercent(-1)))
	stop()
	require.Equal(t, int64(-1), int64(debug.SetGCPercent(-1)))
}

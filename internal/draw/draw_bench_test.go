package draw

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// threadCPU returns the CPU time (user + system) the calling OS thread has used. With the
// goroutine locked to its thread it measures a loop's own cost, which wall-clock ns/op does
// not on a shared, loaded machine.
func threadCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD, Linux */, &ru); err != nil {
		tb.Skipf("getrusage(RUSAGE_THREAD): %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPlace measures Place over every ticket in turn of draws of 10^5 and 10^6 tickets
// (the status call's hot path), with the tabulated round functions New uses and with AES in
// every round (the path of draws above 2^28 tickets). cpu-ns/op is the thread's CPU time.
func BenchmarkPlace(b *testing.B) {
	seed := make([]byte, SeedLen)
	for _, n := range []int64{100_000, 1_000_000} {
		for _, tab := range []bool{true, false} {
			b.Run(fmt.Sprintf("n=%d/tables=%t", n, tab), func(b *testing.B) {
				d, err := newDraw(seed, n, tab)
				if err != nil {
					b.Fatal(err)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var sink int64
				x := int64(0)
				cpu0 := threadCPU(b)
				for b.Loop() {
					x++
					if x > n {
						x = 1
					}
					sink += d.Place(x)
				}
				b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
				if sink == 0 {
					b.Fatal("no places")
				}
			})
		}
	}
}

// BenchmarkNew measures building a draw of 10^6 tickets (tables included).
func BenchmarkNew(b *testing.B) {
	seed := make([]byte, SeedLen)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	for b.Loop() {
		if _, err := New(seed, 1_000_000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

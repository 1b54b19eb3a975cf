package challenge

import (
	"crypto/sha256"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// threadCPU returns the CPU time (user + system) the calling OS thread has used. With the
// goroutine locked to its thread, it is what a benchmark loop costs regardless of how many
// other processes share the machine (wall-clock ns/op is not, on a loaded host).
func threadCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD, Linux */, &ru); err != nil {
		tb.Skipf("getrusage(RUSAGE_THREAD): %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSolverHash is the Go solver's cost per hash. Besides ns/op (wall clock) it reports
// cpu-ns/op and MH/s per core computed from the thread's CPU time.
func BenchmarkSolverHash(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	is := testIssuer(b)
	c, err := is.Issue(Target{Event: "concert", Difficulty: MaxDifficulty}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	s := newSolver(c.String)
	b.ResetTimer()
	cpu0 := threadCPU(b)
	if _, ok := s.search(0, b.N, 64); ok {
		b.Fatal("found 64 zero bits")
	}
	cpu := threadCPU(b) - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/cpu.Seconds()/1e6, "MH/s")
}

// BenchmarkPlainHash is one SHA-256 of a whole 120-byte message, for comparison.
func BenchmarkPlainHash(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	msg := make([]byte, 120)
	cpu0 := threadCPU(b)
	for b.Loop() {
		sha256.Sum256(msg)
	}
	b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

package memstore_test

import (
	"testing"

	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/storetest"
)

func newBenchStore(testing.TB) queue.Store { return memstore.New(memstore.Config{}) }

// BenchmarkMem runs the shared benchmarks (storetest.Bench) on the in-process store.
func BenchmarkMem(b *testing.B) { storetest.Bench(b, newBenchStore) }

// TestBenchSmoke runs each shared benchmark once, so that the test command keeps them working.
func TestBenchSmoke(t *testing.T) { storetest.BenchSmokeLine(t, newBenchStore) }

func newBenchHistory(testing.TB) history.Store { return memstore.NewHistory(memstore.Config{}) }

// BenchmarkMemHistory runs the history store's benchmarks (storetest.HistoryBenchCases).
func BenchmarkMemHistory(b *testing.B) {
	storetest.RunBench(b, storetest.HistoryBenchCases, newBenchHistory)
}

// TestBenchSmokeHistory runs each history benchmark once.
func TestBenchSmokeHistory(t *testing.T) {
	storetest.BenchSmoke(t, storetest.HistoryBenchCases, newBenchHistory)
}

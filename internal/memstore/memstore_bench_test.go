package memstore_test

import (
	"testing"

	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/storetest"
)

func newBenchStore(testing.TB) queue.Store { return memstore.New(memstore.Config{}) }

// BenchmarkMem runs the shared benchmarks (storetest.Bench) on the in-process store.
func BenchmarkMem(b *testing.B) { storetest.Bench(b, newBenchStore) }

// TestBenchSmoke runs each shared benchmark once, so that the test command keeps them working.
func TestBenchSmoke(t *testing.T) { storetest.BenchSmokeLine(t, newBenchStore) }

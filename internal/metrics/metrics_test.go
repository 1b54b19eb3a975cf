package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/storetest"
)

// TestOneReporterAtATime: of the instances sharing leases, one reports the shared gauges; when
// it stops renewing, another takes over once the lease ran out, and the first stops reporting
// at its next renewal.
func TestOneReporterAtATime(t *testing.T) {
	clock := storetest.NewClock()
	leases := memstore.NewLeases(memstore.Config{Now: clock.Now})
	a, b := New(Config{Leases: leases}), New(Config{Leases: leases})
	ctx := context.Background()
	for _, m := range []*Metrics{a, b} {
		if err := m.renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !a.Reporter() || b.Reporter() {
		t.Fatalf("reporters: a %v, b %v; want a only", a.Reporter(), b.Reporter())
	}
	clock.Advance(ReporterTTL / 3)
	_ = a.renew(ctx)
	_ = b.renew(ctx)
	if !a.Reporter() || b.Reporter() {
		t.Fatal("a renewed: still a only")
	}
	clock.Advance(ReporterTTL + time.Millisecond) // a stopped renewing
	_ = b.renew(ctx)
	_ = a.renew(ctx)
	if a.Reporter() || !b.Reporter() {
		t.Fatalf("after a's lease ran out: a %v, b %v; want b only", a.Reporter(), b.Reporter())
	}
	if !New(Config{}).Reporter() {
		t.Fatal("without leases an instance always reports")
	}
}

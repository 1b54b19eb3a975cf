package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/event"
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

// TestAutoGauges: an auto event's state is exported in seconds and ratios, the gates' own
// delay beside the p95 judged, and forgotten when the event leaves mode auto.
func TestAutoGauges(t *testing.T) {
	m := New(Config{})
	m.ObserveAuto("sale", autoadmit.State{MaxActive: 40, AdmitRate: 80, P95MS: 250, GateDelayMS: 120, ErrorRate: 0.02,
		Load: 95, Signal: autoadmit.SignalMissing}, 0.5)
	for name, want := range map[*prometheus.GaugeVec]float64{m.auto.maxActive: 40, m.auto.admitRate: 80, m.auto.p95: 0.25,
		m.auto.gateDelay: 0.12, m.auto.errRatio: 0.02, m.auto.load: 95, m.auto.target: 0.5, m.auto.missing: 1} {
		if got := testutil.ToFloat64(name.WithLabelValues("sale")); got != want {
			t.Errorf("%v: %v, want %v", name, got, want)
		}
	}
	m.ForgetAuto("sale")
	if n := testutil.CollectAndCount(m.auto.gateDelay); n != 0 {
		t.Fatalf("%d series after ForgetAuto", n)
	}
}

// TestTimerOfAnUnnamedOp: a store call whose op was not named to newTimer (a method added to a
// store interface and its wrapper, the name forgotten) is observed under its op, not a panic
// in the handler that called it.
func TestTimerOfAnUnnamedOp(t *testing.T) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "t_seconds"}, []string{"op"})
	tm := newTimer(h, "join")
	tm.since("join", time.Now())
	tm.since("end_booking", time.Now())
	require.Equal(t, 2, testutil.CollectAndCount(h))
}

// TestEventCountersStartAtZero: /metrics has every known event's line resumes and sale
// repairs at 0 before any happened, so that the first one is an increase a query sees.
func TestEventCountersStartAtZero(t *testing.T) {
	m := New(Config{Events: func() []event.Event { return []event.Event{{ID: "concert"}} }})
	fams, err := m.Gatherer().Gather()
	require.NoError(t, err)
	found := map[string]bool{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) == 1 && s.GetLabel()[0].GetValue() == "concert" {
				require.Zero(t, s.GetCounter().GetValue(), f.GetName())
				found[f.GetName()] = true
			}
		}
	}
	require.Equal(t, map[string]bool{"waitroom_line_resumes_total": true, "waitroom_sale_repairs_total": true}, found)
}

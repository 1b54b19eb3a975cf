package crowd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The health probe (--healthz-probe INTERVAL): while the users run, GET /healthz of every
// target once per interval, each probe on a connection of its own (a new TCP connection per
// probe, as a load balancer's health check makes), and report the slowest answer. An instance
// whose /healthz is slow or failing under a flash crowd would be taken out of rotation by its
// load balancer: Report.Healthz and --healthz-max show whether that happened.
//
// The probe runs in the crowd's process: when the crowd itself saturates the CPU (thousands of
// users solving proof-of-work challenges at once), its latencies include the crowd's own
// scheduling delay. Measured with 5,000 users solving challenges of difficulty 15 on this
// 2-core machine: the probe's worst was 6.4 s while a curl loop beside it saw 0.33 s at worst.
// scripts/bots.sh therefore probes with curl too.

// HealthReport is what the probe saw.
type HealthReport struct {
	// IntervalMS is the probe's period.
	IntervalMS int64 `json:"interval_ms"`
	// Probes counts the GETs sent; Failures those without a 200 within the request timeout.
	Probes   int64 `json:"probes"`
	Failures int64 `json:"failures"`
	// LatencyMS summarises the answers' latency (failures included, at the time they took).
	LatencyMS Latency `json:"latency_ms"`
	// MaxAllowedMS is --healthz-max (0: not checked).
	MaxAllowedMS float64 `json:"max_allowed_ms"`
}

// problems lists a failed probe or one slower than allowed.
func (h *HealthReport) problems() []string {
	var p []string
	if h.Failures > 0 {
		p = append(p, fmt.Sprintf("%d /healthz probes failed", h.Failures))
	}
	if h.MaxAllowedMS > 0 && h.LatencyMS.Max > h.MaxAllowedMS {
		p = append(p, fmt.Sprintf("/healthz answered in %s (more than %s)", ms(h.LatencyMS.Max), ms(h.MaxAllowedMS)))
	}
	return p
}

func (h *HealthReport) writeSummary(w io.Writer) {
	fmt.Fprintf(w, "  healthz     %d probes every %dms, %d failed; latency p50 %s  p99 %s  max %s\n",
		h.Probes, h.IntervalMS, h.Failures, ms(h.LatencyMS.P50), ms(h.LatencyMS.P99), ms(h.LatencyMS.Max))
}

// startProbe probes the targets' /healthz every cfg.HealthzProbe until the returned function is
// called, which returns the report (nil without a probe).
func (r *runner) startProbe(ctx context.Context) (stop func() *HealthReport) {
	every := r.cfg.HealthzProbe
	if every <= 0 {
		return func() *HealthReport { return nil }
	}
	client := newClient(1, r.cfg.RequestTimeout)
	client.Transport.(*http.Transport).DisableKeepAlives = true
	hist := newHistogram(int64(time.Hour / time.Microsecond))
	var probes, failures atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, target := range r.cfg.Targets {
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				start := time.Now()
				ok := probe(ctx, client, target+"/healthz")
				if ctx.Err() != nil {
					return // cut by the end of the run: not a failure
				}
				probes.Add(1)
				hist.record(time.Since(start).Microseconds())
				if !ok {
					failures.Add(1)
				}
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	return func() *HealthReport {
		cancel()
		wg.Wait()
		return &HealthReport{IntervalMS: every.Milliseconds(), Probes: probes.Load(), Failures: failures.Load(),
			LatencyMS: hist.latency(), MaxAllowedMS: float64(r.cfg.HealthzMax.Microseconds()) / 1000}
	}
}

// probe reports whether GET u answered 200.
func probe(ctx context.Context, client *http.Client, u string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	drain(resp.Body)
	return resp.StatusCode == http.StatusOK
}

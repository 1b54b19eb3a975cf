// Package metrics defines the Prometheus metrics of a waitroom instance.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
)

// Metrics holds the collectors; all are registered on Registry.
type Metrics struct {
	Registry      *prometheus.Registry
	HTTPDuration  *prometheus.HistogramVec // seconds, by route, method, code
	Joins         *prometheus.CounterVec   // by event, result (admitted, queued, existing)
	Admissions    *prometheus.CounterVec   // by event, kind (join, processor)
	SessionsEnded *prometheus.CounterVec   // by event (idle or unclaimed)
	StoreErrors   prometheus.Counter
	SaleRepairs   *prometheus.CounterVec // by event: drifts of the store's sold count repaired
}

// New registers the metrics; stats reads the live counters of every event on each scrape
// (waitroom_waiting, waitroom_active, waitroom_serving), from the store itself, so every
// instance reports the same shared numbers.
func New(events func() []string, store queue.Store) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "waitroom_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern, method and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method", "code"}),
		Joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_joins_total", Help: "Joins by event and result (admitted, queued, existing).",
		}, []string{"event", "result"}),
		Admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_admissions_total", Help: "Admissions made by this instance, by event and kind (join, processor).",
		}, []string{"event", "kind"}),
		SessionsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_sessions_ended_total", Help: "Admitted sessions ended by this instance's processor (idle or unclaimed).",
		}, []string{"event"}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_store_errors_total", Help: "Store calls that failed (not counting domain errors).",
		}),
		SaleRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_sale_repairs_total",
			Help: "Times this instance's sale sync found the store's sold count drifted from the database's and rebuilt it, by event.",
		}, []string{"event"}),
	}
	reg.MustRegister(m.HTTPDuration, m.Joins, m.Admissions, m.SessionsEnded, m.StoreErrors, m.SaleRepairs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&lineCollector{events: events, store: store}, loopCollector{})
	return m
}

var (
	waitingDesc = prometheus.NewDesc("waitroom_waiting", "Tickets waiting in line.", []string{"event"}, nil)
	activeDesc  = prometheus.NewDesc("waitroom_active", "Admitted sessions holding a slot.", []string{"event"}, nil)
	servingDesc = prometheus.NewDesc("waitroom_serving", "Serving counter: highest ticket number admitted.", []string{"event"}, nil)
	totalDesc   = prometheus.NewDesc("waitroom_admitted_total", "Admissions since the line was created (all instances).", []string{"event"}, nil)
)

// lineCollector reads each event's counters from the store at scrape time.
type lineCollector struct {
	events func() []string
	store  queue.Store
}

func (c *lineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- waitingDesc
	ch <- activeDesc
	ch <- servingDesc
	ch <- totalDesc
}

func (c *lineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, id := range c.events() {
		st, err := c.store.Stats(ctx, id)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(st.Waiting), id)
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(st.Active), id)
		ch <- prometheus.MustNewConstMetric(servingDesc, prometheus.GaugeValue, float64(st.Serving), id)
		ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.CounterValue, float64(st.AdmittedTotal), id)
	}
}

var panicsDesc = prometheus.NewDesc("waitroom_loop_panics_total",
	"Panics recovered in background loops (admission, syncs, issuance, push), by loop; each was logged with its stack.",
	[]string{"loop"}, nil)

// loopCollector exports loop.Panics.
type loopCollector struct{}

func (loopCollector) Describe(ch chan<- *prometheus.Desc) { ch <- panicsDesc }

func (loopCollector) Collect(ch chan<- prometheus.Metric) {
	for name, n := range loop.Panics() {
		ch <- prometheus.MustNewConstMetric(panicsDesc, prometheus.CounterValue, float64(n), name)
	}
}

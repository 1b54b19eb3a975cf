// Package metrics defines the Prometheus metrics of a waitroom instance.
//
// Two kinds of numbers are exported, so that a query over all instances adds up:
//
//   - what this instance did (requests, joins, admissions, bookings, store calls): counters and
//     histograms of its own, to be summed over instances (sum by (event) (rate(...)));
//   - what the shared store holds (the line's waiting, active, serving, admitted total, an
//     event's max_active, units sold and held, a campaign's entries and issued coupons): read
//     from the store at scrape time by ONE instance only — the holder of the "metrics" lease
//     (store.Leases; waitroom_shared_reporter is 1 there, 0 elsewhere) — so that sum() over
//     instances is the store's number, as max() is. When the holder stops, another instance
//     takes the lease within ReporterTTL.
package metrics

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/waitroom/waitroom/internal/buildinfo"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/store"
)

// ReporterTTL is how long the "metrics" lease lasts without a renewal; it is renewed every
// third of it.
const ReporterTTL = 15 * time.Second

// Histogram buckets (seconds). A wait in line runs from nothing (admitted at once) through
// minutes to hours (a flash sale with a long line); an issuance takes well under a second when
// the workers keep up and minutes to hours when the database falls behind.
var (
	TimeInQueueBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800}
	IssuanceLagBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// Config says where the shared gauges come from. Every field may be nil (tests): the gauges
// whose source is missing are not exported.
type Config struct {
	Events    func() []event.Event // the events (the registry's cache)
	Campaigns func() []string      // the coupon campaigns' ids
	Line      queue.Store
	Sale      sale.Store
	// CouponStats returns a campaign's figures (issuance.Service.Stats: from the database).
	CouponStats func(ctx context.Context, campaign string) (coupon.Stats, error)
	// Leases decides which instance reports the shared gauges; nil: this one always does (one
	// instance, or tests).
	Leases store.Leases
	// DB is the connection pool of the database, whose figures this instance exports as
	// go_sql_* with db_name="waitroom" (connections open, in use, idle; waits for a connection:
	// go_sql_wait_count_total, go_sql_wait_duration_seconds_total). Nil: not exported.
	DB *sql.DB
	// LinesDB is the pool of the line numbers, exported the same way with
	// db_name="waitroom_lines". Nil: none of its own.
	LinesDB *sql.DB
	// Connections returns the counts of the listeners' connections (package connlimit), read
	// at scrape time. Nil: not exported.
	Connections func() ConnCounts
	Logger      *slog.Logger
}

// Metrics holds the collectors; all are registered on Registry.
type Metrics struct {
	Registry      *prometheus.Registry
	HTTPDuration  *prometheus.HistogramVec // seconds, by route (pattern without the method), method, code
	Joins         *prometheus.CounterVec   // by event, result (admitted, queued, existing)
	Admissions    *prometheus.CounterVec   // by event, kind (join, processor)
	SessionsEnded *prometheus.CounterVec   // by event (idle or unclaimed)
	Bookings      *prometheus.CounterVec   // by event, outcome
	StoreDuration *prometheus.HistogramVec // seconds, by store call (op)
	StoreErrors   prometheus.Counter
	SaleRepairs   *prometheus.CounterVec // by event: drifts of the store's sold count repaired
	// LineResumes counts, by event, the lines this instance resumed after Redis lost them
	// (redisstore.Config.OnResume).
	LineResumes *prometheus.CounterVec
	// TimeInQueue is the time from join to admission (seconds), by event, observed when a
	// ticket is admitted: 0 for a join admitted at once (by the instance that took the join),
	// the wait of each ticket a processor step admitted (by the instance whose step it was;
	// see package history for how the join times are known).
	TimeInQueue *prometheus.HistogramVec
	// IssuanceLag is the time from a coupon campaign entry to its coupon's commit in the
	// database (seconds), by campaign, observed by the instance whose worker issued it.
	IssuanceLag *prometheus.HistogramVec
	// UntrustedForwarded counts requests that carried X-Forwarded-For or Forwarded from a peer
	// not in --trusted-proxies (a load balancer missing from it makes its clients one client).
	UntrustedForwarded prometheus.Counter
	// ConnsRefused counts connections refused by this instance's listeners, by listener and
	// reason (package connlimit's, and reserve: a request answered 503 on the reserve).
	ConnsRefused *prometheus.CounterVec
	// MalformedRequests counts requests whose framing did not parse (answered by
	// httpjson.FramingAnswer before any handler), by listener and problem code.
	MalformedRequests *prometheus.CounterVec
	// ConnsShed counts idle keep-alive connections closed to make room, by listener and
	// reason (package connlimit's).
	ConnsShed *prometheus.CounterVec

	// AutoChanges counts the changes of an auto event's limits this instance's controller
	// made, by event and direction (up, down).
	AutoChanges *prometheus.CounterVec

	auto     autoGauges
	cfg      Config
	holder   string      // this instance's name in the lease
	reporter atomic.Bool // this instance holds the "metrics" lease
	loop     loop.Loop
}

// ObserveHTTP records one answer in HTTPDuration: route and method as labelled there, code the
// status, took the time to the end of the answer. The gate's listener reports through it
// (gateway.Config.Observe).
func (m *Metrics) ObserveHTTP(route, method string, code int, took time.Duration) {
	m.HTTPDuration.WithLabelValues(route, method, strconv.Itoa(code)).Observe(took.Seconds())
}

// New registers the metrics.
func New(cfg Config) *Metrics {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand never fails (Go 1.24+)
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg, cfg: cfg, holder: hex.EncodeToString(id[:]),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "waitroom_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern (without the method), method and status code.",
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
		Bookings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_bookings_total",
			Help: "Booking requests answered by this instance, by event and outcome (confirmed, replayed, conflict, sold_out, refused, error).",
		}, []string{"event", "outcome"}),
		StoreDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "waitroom_store_call_duration_seconds",
			Help:    "Latency of this instance's calls to the line and sale store (Redis, or in process), by call.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_store_errors_total", Help: "Store calls that failed (not counting domain errors).",
		}),
		SaleRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_sale_repairs_total",
			Help: "Times this instance's sale sync found the store's sold count drifted from the database's and rebuilt it, by event.",
		}, []string{"event"}),
		LineResumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_line_resumes_total",
			Help: "Lines this instance resumed from the durable numbers after Redis lost them (restarted empty, failed over to a replica behind, evicted), by event: admitted sessions of the lost copy may have ended (docs/durability.md).",
		}, []string{"event"}),
		TimeInQueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "waitroom_time_in_queue_seconds",
			Help:    "Time from join to admission of the tickets this instance admitted (0 for a join admitted at once), by event.",
			Buckets: TimeInQueueBuckets,
		}, []string{"event"}),
		UntrustedForwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_untrusted_forwarded_requests_total",
			Help: "Requests carrying X-Forwarded-For or Forwarded from a peer not in --trusted-proxies: if it is your load balancer, every client behind it counts as one for the limits.",
		}),
		IssuanceLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "waitroom_coupon_issuance_lag_seconds",
			Help:    "Time from a campaign entry to its coupon's commit in the database, of the coupons this instance issued, by campaign.",
			Buckets: IssuanceLagBuckets,
		}, []string{"campaign"}),
		ConnsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_connections_refused_total",
			Help: "Connections this instance refused, by listener (api, gate, metrics) and reason: client (the client's cap, --max-conns-per-client), total (--max-conns, or the client's share of the reserve), reserve (a request other than a health check, /metrics or one with credentials on a connection of the reserve, answered 503).",
		}, []string{"listener", "reason"}),
		MalformedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_malformed_requests_total",
			Help: "Requests whose HTTP framing did not parse, answered before any handler (so not in waitroom_http_request_duration_seconds), by listener (api, gate, metrics) and problem code (malformed_request, header_too_large, expectation_failed, unsupported_transfer_encoding, unsupported_http_version).",
		}, []string{"listener", "code"}),
		ConnsShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_connections_shed_total",
			Help: "Idle keep-alive connections this instance closed to make room, by listener and reason: client (for a new connection of the same client at its cap), total (at --max-conns), busy (idle for --busy-idle-timeout while busy), push (a client holding a push connection: idle for 1 s while busy), files (accept failed for want of files), silent (no request within 0.5 s, to make room).",
		}, []string{"listener", "reason"}),
	}
	m.AutoChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waitroom_auto_changes_total",
		Help: "Admission mode auto: changes of the effective limits this instance's controller made, by event and direction (up, down).",
	}, []string{"event", "direction"})
	m.auto = newAutoGauges()
	reg.MustRegister(m.AutoChanges)
	reg.MustRegister(m.auto.all()...)
	if cfg.Leases == nil {
		m.reporter.Store(true)
	}
	reg.MustRegister(m.HTTPDuration, m.Joins, m.Admissions, m.SessionsEnded, m.Bookings, m.StoreDuration, m.StoreErrors, m.SaleRepairs,
		m.LineResumes, m.TimeInQueue, m.IssuanceLag, m.ConnsRefused, m.ConnsShed, m.MalformedRequests, m.UntrustedForwarded,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&sharedCollector{m: m}, loopCollector{})
	reg.MustRegister(buildinfo.Collector()) // waitroom_build_info{version,revision,goversion} 1
	if cfg.DB != nil {
		reg.MustRegister(collectors.NewDBStatsCollector(cfg.DB, "waitroom"))
	}
	if cfg.LinesDB != nil {
		reg.MustRegister(collectors.NewDBStatsCollector(cfg.LinesDB, "waitroom_lines"))
	}
	if cfg.Connections != nil {
		reg.MustRegister(connsCollector(cfg.Connections))
	}
	return m
}

// Gatherer is what /metrics serves: the Registry, with every known event's
// waitroom_line_resumes_total and waitroom_sale_repairs_total made first (at 0 until they
// happen). A counter whose first sample is already 1 has no increase a query can see, so an
// alert on the first resume of a line (docs/durability.md) would miss it; and the dashboard
// finds the series before anything went wrong.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if m.cfg.Events != nil {
			for _, e := range m.cfg.Events() {
				m.LineResumes.WithLabelValues(e.ID)
				m.SaleRepairs.WithLabelValues(e.ID)
			}
		}
		return m.Registry.Gather()
	})
}

// Reporter reports whether this instance exports the shared gauges now.
func (m *Metrics) Reporter() bool { return m.reporter.Load() }

// renew takes or renews the "metrics" lease.
func (m *Metrics) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReporterTTL/3)
	defer cancel()
	held, err := m.cfg.Leases.Lease(ctx, "metrics", m.holder, ReporterTTL)
	m.reporter.Store(held && err == nil)
	return err
}

// Start takes part in the "metrics" lease (renewed every ReporterTTL/3) until Stop or ctx
// ends. Without Leases it does nothing: this instance always reports.
func (m *Metrics) Start(ctx context.Context) error {
	if m.cfg.Leases == nil {
		return nil
	}
	if err := m.renew(ctx); err != nil {
		m.cfg.Logger.Warn("metrics lease", "err", err) // not fatal: another instance reports
	}
	m.loop.Start(ctx, "metrics lease", ReporterTTL/3, m.cfg.Logger, m.renew)
	return nil
}

// Stop ends the lease's renewals (the lease runs out by itself). Safe before Start and twice.
func (m *Metrics) Stop(context.Context) error {
	m.loop.Stop()
	return nil
}

var (
	reporterDesc = prometheus.NewDesc("waitroom_shared_reporter",
		"1 on the one instance that exports the shared store's gauges (the holder of the metrics lease), 0 elsewhere.", nil, nil)
	waitingDesc   = prometheus.NewDesc("waitroom_waiting", "Tickets waiting in line (shared: reported by one instance).", []string{"event"}, nil)
	activeDesc    = prometheus.NewDesc("waitroom_active", "Admitted sessions holding a slot (shared: reported by one instance).", []string{"event"}, nil)
	maxActiveDesc = prometheus.NewDesc("waitroom_max_active", "The event's max_active (shared: reported by one instance).", []string{"event"}, nil)
	servingDesc   = prometheus.NewDesc("waitroom_serving", "Serving counter: highest ticket number admitted (shared: reported by one instance).", []string{"event"}, nil)
	totalDesc     = prometheus.NewDesc("waitroom_admitted_total", "Admissions since the line was created, all instances (shared: reported by one instance).", []string{"event"}, nil)
	capacityDesc  = prometheus.NewDesc("waitroom_sale_capacity", "Units for sale (shared: reported by one instance).", []string{"event"}, nil)
	soldDesc      = prometheus.NewDesc("waitroom_sale_sold", "Units sold, as the store counts them (shared: reported by one instance).", []string{"event"}, nil)
	heldDesc      = prometheus.NewDesc("waitroom_sale_held", "Units held (shared: reported by one instance).", []string{"event"}, nil)
	entriesDesc   = prometheus.NewDesc("waitroom_coupon_entries", "Entries of a coupon campaign (shared: reported by one instance).", []string{"campaign"}, nil)
	issuedDesc    = prometheus.NewDesc("waitroom_coupon_issued", "Coupons issued (shared: reported by one instance).", []string{"campaign"}, nil)
	stockDesc     = prometheus.NewDesc("waitroom_coupon_stock", "A campaign's stock (shared: reported by one instance).", []string{"campaign"}, nil)
)

// sharedCollector reads the shared store's numbers at scrape time, on the reporting instance.
type sharedCollector struct{ m *Metrics }

func (c *sharedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{reporterDesc, waitingDesc, activeDesc, maxActiveDesc, servingDesc, totalDesc,
		capacityDesc, soldDesc, heldDesc, entriesDesc, issuedDesc, stockDesc} {
		ch <- d
	}
}

func (c *sharedCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	reporting := 0.0
	if m.reporter.Load() {
		reporting = 1
	}
	ch <- prometheus.MustNewConstMetric(reporterDesc, prometheus.GaugeValue, reporting)
	if reporting == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v int64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), label)
	}
	if m.cfg.Events != nil && m.cfg.Line != nil {
		for _, e := range m.cfg.Events() {
			st, err := m.cfg.Line.Stats(ctx, e.ID)
			if err != nil {
				continue
			}
			gauge(waitingDesc, st.Waiting, e.ID)
			gauge(activeDesc, st.Active, e.ID)
			gauge(maxActiveDesc, e.MaxActive, e.ID)
			gauge(servingDesc, st.Serving, e.ID)
			ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.CounterValue, float64(st.AdmittedTotal), e.ID)
			if e.ForSale() && m.cfg.Sale != nil {
				if a, err := m.cfg.Sale.Counts(ctx, e.ID); err == nil {
					gauge(capacityDesc, a.Capacity, e.ID)
					gauge(soldDesc, a.Sold, e.ID)
					gauge(heldDesc, a.Held, e.ID)
				}
			}
		}
	}
	if m.cfg.Campaigns != nil && m.cfg.CouponStats != nil {
		for _, id := range m.cfg.Campaigns() {
			if st, err := m.cfg.CouponStats(ctx, id); err == nil {
				gauge(entriesDesc, st.Entries, id)
				gauge(issuedDesc, st.Issued, id)
				gauge(stockDesc, st.Stock, id)
			}
		}
	}
}

var (
	connsDesc = prometheus.NewDesc("waitroom_connections",
		"Connections open on this instance's listeners, push connections included, by listener (api, gate, metrics).",
		[]string{"listener"}, nil)
	connsIdleDesc = prometheus.NewDesc("waitroom_connections_idle",
		"Idle keep-alive connections (between two requests) of this instance's listeners, the first closed under pressure.", nil, nil)
	connsMaxDesc = prometheus.NewDesc("waitroom_connections_max",
		"The instance's cap of open connections, all listeners together (--max-conns).", nil, nil)
)

// ConnCounts are the counts of the listeners' connections.
type ConnCounts struct {
	Open map[string]int // open connections by listener (api, gate, metrics)
	Idle int            // idle keep-alive connections, all listeners
	Max  int            // the cap of them all (--max-conns)
}

// connsCollector exports Config.Connections.
type connsCollector func() ConnCounts

func (connsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connsDesc
	ch <- connsIdleDesc
	ch <- connsMaxDesc
}

func (f connsCollector) Collect(ch chan<- prometheus.Metric) {
	c := f()
	for name, n := range c.Open {
		ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(connsIdleDesc, prometheus.GaugeValue, float64(c.Idle))
	ch <- prometheus.MustNewConstMetric(connsMaxDesc, prometheus.GaugeValue, float64(c.Max))
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

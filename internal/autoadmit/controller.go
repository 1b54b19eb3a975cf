package autoadmit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
)

// Store keeps each event's signals and controller state, shared by the instances. Every
// method is one atomic step. Implemented by memstore and redisstore (under the event's hash
// tag), proved by storetest.RunAuto.
type Store interface {
	// AddSignals adds each delta to its counter of event's signals (running totals from 0),
	// which expire SignalsTTL after the last add.
	AddSignals(ctx context.Context, event string, deltas map[string]int64) error
	// Signals returns event's signal counters (none: an empty map).
	Signals(ctx context.Context, event string) (map[string]int64, error)
	// Control returns event's controller state as last written (data "" and seq 0: none).
	Control(ctx context.Context, event string) (data string, seq int64, err error)
	// SetControl writes data as event's controller state under seq when the stored seq is
	// seq-1, and in the same step sets the effective max_active and admit_rate of event's
	// line (when it exists: a line made later starts from its configuration, and the next
	// write sets them). It reports whether it wrote. The state expires SignalsTTL after its
	// last write.
	SetControl(ctx context.Context, event string, seq int64, data string, maxActive int64, admitRate float64) (bool, error)
}

// SignalsTTL is how long an event's signals and state live after their last write.
const SignalsTTL = 24 * time.Hour

// Leases is the part of store.Leases the controller uses.
type Leases interface {
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
}

// LeaseName is the name of event's controller lease.
func LeaseName(event string) string { return "auto:" + event }

// Series is the history series of an event's controller samples (Sample), one per step.
func Series(event string) string { return "auto:" + event }

// SeriesKeep is how long the samples are kept.
const SeriesKeep = time.Hour

// Sample is one controller step as the console charts it (JSON in the history series).
type Sample struct {
	MaxActive int64   `json:"ma"`
	AdmitRate float64 `json:"ar"`
	P95MS     float64 `json:"p95"`
	ErrorRate float64 `json:"er"`
	Load      float64 `json:"load"`
	Active    int64   `json:"act"`
	Waiting   int64   `json:"wait"`
	Signal    string  `json:"sig"`
	Reason    string  `json:"why,omitempty"` // set when the limits changed at this step
}

// Config configures a Controller.
type Config struct {
	Store   Store       // required
	Leases  Leases      // required
	Line    queue.Store // required: the sessions active and waiting
	Signals *Signals    // required: this instance's measurements, flushed to Store
	// Events lists the events (the registry's); those in mode auto are controlled. Required.
	Events func() []event.Event
	// History, when set, receives one Sample per step of each event (Series).
	History history.Store
	// Instance names this instance (the lease's holder). Required.
	Instance string
	// Interval is the controller's step (default 1 s); Flush how often Signals are added to
	// the store (default 250 ms).
	Interval, Flush time.Duration
	// Client polls the events' health URLs (default: a client with a 2 s timeout that follows
	// no redirect: a 3xx counts as an error, so that an allowed URL cannot send the poll
	// elsewhere).
	Client *http.Client
	// HealthURLs are the URLs an event's auto.health_url may be (serve --health-urls); one
	// it does not allow (stored before the list changed) is not polled. The zero value
	// allows none.
	HealthURLs HealthURLs
	// OnState is called on every instance, every step, with each auto event's state as
	// stored (the registry's effective limits, the metrics).
	OnState func(event string, s State)
	Now     func() time.Time // default time.Now
	Logger  *slog.Logger
}

// Controller runs the flush of this instance's signals and the controllers of the events
// whose lease it holds.
type Controller struct {
	cfg         Config
	loop, flush loop.Loop
	mu          sync.Mutex
	base        map[string]baseline // per event whose lease this instance held at its last step
	polling     sync.Map            // event -> *atomic.Bool: a health poll in flight
	refused     sync.Map            // "event url" of health URLs not allowed, warned of once
	polls       sync.WaitGroup      // the polls in flight, waited for at Stop
}

type baseline struct {
	tot Window
	at  time.Time
	// heard is when the last window with a signal ended (or the holder started).
	heard time.Time
}

// NewController checks cfg and returns a Controller; Start runs it.
func NewController(cfg Config) (*Controller, error) {
	if cfg.Store == nil || cfg.Leases == nil || cfg.Line == nil || cfg.Signals == nil || cfg.Events == nil || cfg.Instance == "" {
		return nil, errors.New("autoadmit: Store, Leases, Line, Signals, Events and Instance are required")
	}
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.Flush = cmp.Or(cfg.Flush, 250*time.Millisecond)
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 2 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Controller{cfg: cfg, base: map[string]baseline{}}, nil
}

// Instance is this instance's name as the leases' holder.
func (c *Controller) Instance() string { return c.cfg.Instance }

// Start runs the flush every Flush and the controllers every Interval until Stop, both on
// the wall clock's multiples of their periods (loop.Loop.Align), the controllers half a flush
// after a flush: every instance's flushes then fall at the same instants, and a window between
// two reads of the holder holds Interval/Flush flushes of each, not one more or less as the
// loops' ticks race (with clocks that agree within half a flush).
func (c *Controller) Start(ctx context.Context) error {
	c.flush.Align = true
	c.loop.Align, c.loop.Offset = true, c.cfg.Flush/2
	c.flush.Start(ctx, "auto signals flush", c.cfg.Flush, c.cfg.Logger, c.Flush)
	c.loop.Start(ctx, "auto admission controller", c.cfg.Interval, c.cfg.Logger, c.Step)
	return nil
}

// Stop ends both loops, then flushes what was measured last.
func (c *Controller) Stop(ctx context.Context) error {
	c.loop.Stop()
	c.flush.Stop()
	c.polls.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return c.write(fctx, c.cfg.Signals.TakeAll())
}

// Flush adds this instance's signals since the last flush (Signals.Take: the seconds that
// ended) to the store; what fails to be written is kept for the next.
func (c *Controller) Flush(ctx context.Context) error { return c.write(ctx, c.cfg.Signals.Take()) }

func (c *Controller) write(ctx context.Context, taken map[string]map[string]int64) error {
	var errs []error
	for ev, d := range taken {
		if err := c.cfg.Store.AddSignals(ctx, ev, d); err != nil {
			c.cfg.Signals.Give(ev, d)
			errs = append(errs, fmt.Errorf("event %s: %w", ev, err))
		}
	}
	return errors.Join(errs...)
}

// Step runs one step of every auto event: the lease holder decides and writes; every
// instance reads the state (OnState).
func (c *Controller) Step(ctx context.Context) error {
	all := c.cfg.Events()
	var errs []error
	for _, e := range all {
		if !e.Auto.Enabled {
			c.forget(e.ID)
			continue
		}
		if err := c.step(ctx, e, all); err != nil {
			errs = append(errs, fmt.Errorf("event %s: %w", e.ID, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) forget(id string) {
	c.mu.Lock()
	delete(c.base, id)
	c.mu.Unlock()
}

// ReadState returns event's stored state, or Start(a) when it has none; its Decisions are
// never nil (GET /v1/events/{event_id}/auto documents an array).
func ReadState(ctx context.Context, st Store, ev string, a event.Auto) (State, int64, error) {
	data, seq, err := st.Control(ctx, ev)
	if err != nil {
		return State{}, 0, err
	}
	s := Start(a)
	if data != "" {
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			return State{}, 0, fmt.Errorf("autoadmit: state of %s: %w", ev, err)
		}
	}
	if s.Decisions == nil {
		s.Decisions = []Decision{} // a list in JSON, empty before the first change
	}
	return s, seq, nil
}

func (c *Controller) step(ctx context.Context, e event.Event, all []event.Event) error {
	held, err := c.cfg.Leases.Lease(ctx, LeaseName(e.ID), c.cfg.Instance, 3*c.cfg.Interval)
	if err != nil {
		return err
	}
	s, seq, err := ReadState(ctx, c.cfg.Store, e.ID, e.Auto)
	if err != nil {
		return err
	}
	if !held {
		c.forget(e.ID)
		if c.cfg.OnState != nil && seq > 0 {
			c.cfg.OnState(e.ID, s)
		}
		return nil
	}
	if u := e.Auto.HealthURL; u != "" {
		if c.cfg.HealthURLs.Allows(u) {
			c.poll(e.ID, u)
		} else if _, told := c.refused.LoadOrStore(e.ID+" "+u, true); !told {
			c.cfg.Logger.Warn("auto.health_url is not among serve's --health-urls: not polled", "event", e.ID)
		}
	}
	now := c.cfg.Now()
	var tot Window
	events := 0
	for _, o := range all {
		if o.Auto.Enabled && o.Auto.Origin == e.Auto.Origin {
			events++
			m, err := c.cfg.Store.Signals(ctx, o.ID)
			if err != nil {
				return err
			}
			tot = tot.Add(FromCounters(m))
		}
	}
	st, err := c.cfg.Line.Stats(ctx, e.ID)
	if err != nil && !errors.Is(err, queue.ErrEventNotFound) {
		return err
	}
	obs := Observation{Active: st.Active, Waiting: st.Waiting, Shared: events > 1}
	c.mu.Lock()
	b, ok := c.base[e.ID]
	c.mu.Unlock()
	rebase := !ok
	heard := now
	if ok {
		heard = b.heard
		d, fine := tot.Sub(b.tot)
		span := now.Sub(b.at)
		switch {
		case !fine:
			rebase = true
		case (d.Total() >= MinSamples && span >= c.cfg.Interval*9/10) || (d.Total() >= MinFew && span >= FewSpan):
			obs.Window, obs.Span = &d, span
			rebase, heard = true, now
		default:
			obs.Quiet = now.Sub(heard)
			rebase = span >= MaxQuiet // a missing signal starts a new window each MaxQuiet
		}
	}
	n := Decide(s, e.Auto, obs)
	changed := Changed(s, n)
	n.Seq, n.At, n.Holder = seq+1, now.UnixMilli(), c.cfg.Instance
	if changed {
		n.Record(now)
		rebase = true // the next window starts with the new limits
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	wrote, err := c.cfg.Store.SetControl(ctx, e.ID, n.Seq, string(data), n.MaxActive, n.AdmitRate)
	if err != nil {
		return err
	}
	if !wrote { // another holder wrote meanwhile: start again from its state next time
		c.forget(e.ID)
		return nil
	}
	if rebase {
		c.mu.Lock()
		c.base[e.ID] = baseline{tot: tot, at: now, heard: heard}
		c.mu.Unlock()
	}
	if changed && c.cfg.Logger.Enabled(ctx, slog.LevelInfo) {
		c.cfg.Logger.Info("auto admission", "event", e.ID, "max_active", n.MaxActive, "admit_rate", n.AdmitRate, "reason", n.Reason)
	}
	if c.cfg.History != nil {
		smp := Sample{MaxActive: n.MaxActive, AdmitRate: n.AdmitRate, P95MS: n.P95MS, ErrorRate: n.ErrorRate,
			Load: n.Load, Active: n.Active, Waiting: n.Waiting, Signal: n.Signal}
		if changed {
			smp.Reason = n.Reason
		}
		b, _ := json.Marshal(smp) // numbers and strings cannot fail
		if err := c.cfg.History.Append(ctx, Series(e.ID), now, string(b), SeriesKeep); err != nil {
			return err
		}
	}
	if c.cfg.OnState != nil {
		c.cfg.OnState(e.ID, n)
	}
	return nil
}

// HealthReport is what an origin reports of itself (POST /v1/events/{id}/health) and what a
// polled health URL answers: the requests it served since its last report, the errors among
// them and their p95 latency (ms).
type HealthReport struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	P95MS    float64 `json:"p95_ms"`
}

// HealthReportFields is a HealthReport as sent, each field nil when left out: a report counts
// only whole (a reporter that forgot p95_ms would report a perfect latency).
type HealthReportFields struct {
	Requests *int64   `json:"requests"`
	Errors   *int64   `json:"errors"`
	P95MS    *float64 `json:"p95_ms"`
}

// Report returns the report, or a message naming what is left out.
func (f HealthReportFields) Report() (HealthReport, string) {
	if f.Requests == nil || f.Errors == nil || f.P95MS == nil {
		return HealthReport{}, "requests, errors and p95_ms are each required (0 where none)"
	}
	return HealthReport{Requests: *f.Requests, Errors: *f.Errors, P95MS: *f.P95MS}, ""
}

// Validate returns a message naming the field of a report that cannot be counted.
func (r HealthReport) Validate() string {
	switch {
	case r.Requests < 0 || r.Requests > 1e9:
		return "requests must be between 0 and 1000000000"
	case r.Errors < 0 || r.Errors > r.Requests:
		return "errors must be between 0 and requests"
	case r.P95MS < 0 || r.P95MS > 3.6e6 || r.P95MS != r.P95MS:
		return "p95_ms must be between 0 and 3600000"
	}
	return ""
}

// poll GETs a health URL in the background (one at a time per event): a JSON HealthReport
// counts as reported, one with all its fields that is not valid, or a JSON object naming a
// report's field that does not parse, as one error; any other 2xx answer as one request of the
// latency it took; no answer or another status as one error.
func (c *Controller) poll(ev, url string) {
	f, _ := c.polling.LoadOrStore(ev, new(atomic.Bool))
	busy := f.(*atomic.Bool)
	if !busy.CompareAndSwap(false, true) {
		return
	}
	c.polls.Add(1)
	go func() {
		defer c.polls.Done()
		defer busy.Store(false)
		start := time.Now()
		resp, err := c.cfg.Client.Get(url)
		ms := float64(time.Since(start)) / float64(time.Millisecond)
		if err != nil {
			c.cfg.Signals.Report(ev, 1, 1, ms)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode/100 != 2 {
			c.cfg.Signals.Report(ev, 1, 1, ms)
			return
		}
		var f HealthReportFields
		err = json.Unmarshal(body, &f)
		var fields map[string]json.RawMessage
		if err != nil && json.Unmarshal(body, &fields) == nil && (fields["requests"] != nil || fields["errors"] != nil || fields["p95_ms"] != nil) {
			// A report's field of the wrong type ("p95_ms": "5", a number past int64): a
			// report that cannot be read, so an error, not a healthy answer (helper-79).
			c.cfg.Logger.Warn("auto admission: the health URL's report does not parse; counted as an error", "event", ev, "err", err)
			c.cfg.Signals.Report(ev, 1, 1, ms)
			return
		}
		if err == nil {
			if r, missing := f.Report(); missing == "" {
				if why := r.Validate(); why != "" {
					// A report the controller cannot take (more errors than requests, a p95
					// past an hour) is no sign of health: one error, as POST .../health
					// answers it 422 (helper-77: it counted as a healthy answer).
					c.cfg.Logger.Warn("auto admission: the health URL's report is invalid; counted as an error", "event", ev, "why", why)
					c.cfg.Signals.Report(ev, 1, 1, ms)
					return
				}
				if r.Requests > 0 {
					c.cfg.Signals.Report(ev, r.Requests, r.Errors, r.P95MS)
					return
				}
			}
		}
		c.cfg.Signals.Report(ev, 1, 0, ms)
	}()
}

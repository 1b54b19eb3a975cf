// Package recorder is the history service of one instance (package history says why the
// history lives in the store, shared by the instances). Every Interval a Recorder adds this
// instance's counts (answers 429 and 503 per event; per life of an event, the refusals of the
// line's rules by kind and the measured times in line, history.LifeSeries) to the shared
// counters and records its heartbeat; the one instance holding the "history" lease also
// samples every event and coupon campaign into their series. It serves those series with their
// rates and forecasts (the operator console's GET /v1/events/{event_id}/history), lists the
// instances alive, and turns the admission steps of this instance into waits in line
// (waitroom_time_in_queue_seconds, and the measured waits of the report).
package recorder

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/store"
)

// Defaults of Config.
const (
	// DefaultInterval: 720 samples an hour per event, about 130 KB in Redis (measured: MEMORY
	// USAGE of a sorted set of 720 samples of some 70 bytes), and rates fresh to 5 s — the
	// console refreshes its charts as often.
	DefaultInterval = 5 * time.Second
	// DefaultWindow is how long the samples are kept: the console's charts show the last hour.
	DefaultWindow = time.Hour
	// ClockStep and ClockWindow: the number clock keeps a checkpoint a minute for a day while
	// people join (none while the last number stands still), for the join times of tickets
	// that waited longer than the window: at most 1,440, about 190 KB in Redis.
	ClockStep   = time.Minute
	ClockWindow = 24 * time.Hour
	// LeaseName is the lease the sampling instance holds (store.Leases).
	LeaseName = "history"
)

// Config configures a Recorder.
type Config struct {
	Store history.Store // required
	// Leases elects the one instance that samples; nil: this one always does (one instance).
	Leases store.Leases
	Line   queue.Store // required
	// Sale gives the sale's figures of events for sale; nil: none.
	Sale sale.Store
	// CouponStats and Campaigns give the campaigns' figures (issuance.Service.Stats); nil: none.
	CouponStats func(ctx context.Context, campaign string) (coupon.Stats, error)
	Campaigns   func() []string
	// Events lists the events (the registry's cache). Required.
	Events func() []event.Event
	// Known reports whether an event exists (the registry's cache): Count counts only those.
	// Nil: the events Events listed at the last step.
	Known func(id string) bool
	// Interval is the time between two samples, beats and additions to the counters. Defaults
	// to DefaultInterval.
	Interval time.Duration
	// Window is how long samples are kept. Defaults to DefaultWindow.
	Window time.Duration
	// Info describes this instance to the others (GET /v1/instances).
	Info Info
	// ObserveWait, when set, gets the time in line of every ticket an admission step of this
	// instance admitted (see Admitted).
	ObserveWait func(event string, wait time.Duration)
	// Now is this instance's clock, for how fresh the series read are (the samples carry the
	// store's). Defaults to time.Now.
	Now    func() time.Time
	Logger *slog.Logger // defaults to slog.Default()
	// Warnings lists what this instance found wrong with its setup (a load balancer missing
	// from --trusted-proxies), sent with every heartbeat for the console. Nil: none.
	Warnings func() []string
	// Archive keeps the long history (history.Archive: SQL), which the sampler writes as it
	// samples; nil: none beyond Window.
	Archive history.Archive
	// ArchiveEvery is how often the bucket in progress is written to Archive. Defaults to
	// DefaultArchiveEvery.
	ArchiveEvery time.Duration
}

// Info is what an instance tells the others about itself.
type Info struct {
	Name      string    `json:"name"` // the host name, say
	Addr      string    `json:"addr"` // where it listens ("" when unknown)
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	// Sampler is true on the instance that holds the history lease (as of its last beat).
	Sampler bool `json:"sampler"`
	// Warnings are what the instance found wrong with its setup, for the console (as of its
	// last beat; Config.Warnings).
	Warnings []string `json:"warnings,omitempty"`
	// Keys are the ids of its admission-token keys (token.Admissions.KIDs, the signing key's
	// first), which every instance must share (WAITROOM_TOKEN_KEY).
	Keys []string `json:"keys,omitempty"`
}

// Instance is an instance alive, as of this instance's last beat.
type Instance struct {
	ID string
	Info
	Until time.Time // when it stops counting as alive unless it beats again (the store's clock)
	Self  bool      // this instance
}

// Recorder is one instance's history service. Start runs its loop; the read methods work
// without it (on what the store has).
type Recorder struct {
	cfg     Config
	id      string
	sampler atomic.Bool
	loop    loop.Loop
	known   atomic.Pointer[map[string]bool]   // the events' ids, as of the last step
	epochs  atomic.Pointer[map[string]string] // the events' lives (event.Event.Epoch), as of the last step

	mu      sync.Mutex
	counts  map[string]*[2]int64          // event -> this instance's 429s and 503s not yet added
	lives   map[string]*lifeCounts        // event -> this instance's refusals and waits not yet added
	alive   []history.Instance            // as of the last beat
	clockAt map[string]history.Checkpoint // event -> the last checkpoint appended (the sampler's)
	phases  map[string]phase              // event -> its life as the sampler last saw it (lifecycle.go)
	cache   map[string]*cached            // series -> the samples read so far
	// countersCache is the counters of life series as last read (life.go).
	countersCache map[string]countersRead
	archived      map[string]*archiving // event -> its long history in progress (archive.go)
	pruned        time.Time             // when the long history was last pruned (sample time)

	waits    chan admitStep
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// admitStep is an admission step waiting to be turned into waits.
type admitStep struct {
	event string
	r     queue.AdmitResult
}

// New returns a Recorder. Errors: a required field missing.
func New(cfg Config) (*Recorder, error) {
	if cfg.Store == nil || cfg.Line == nil || cfg.Events == nil {
		return nil, errors.New("recorder: Config.Store, Line and Events are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.ArchiveEvery <= 0 {
		cfg.ArchiveEvery = DefaultArchiveEvery
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand never fails (Go 1.24+)
	r := &Recorder{cfg: cfg, id: hex.EncodeToString(id[:]), counts: map[string]*[2]int64{}, lives: map[string]*lifeCounts{},
		clockAt: map[string]history.Checkpoint{}, archived: map[string]*archiving{},
		phases: map[string]phase{},
		cache:  map[string]*cached{}, waits: make(chan admitStep, 256)}
	if cfg.Leases == nil {
		r.sampler.Store(true)
	}
	return r, nil
}

// Interval is the time between two samples.
func (r *Recorder) Interval() time.Duration { return r.cfg.Interval }

// Window is how long samples are kept.
func (r *Recorder) Window() time.Duration { return r.cfg.Window }

// leaseTTL is how long the history lease lasts without a renewal: three intervals, at least
// 15 s (a sampler that stops is replaced within it; a slow step does not lose the lease).
func (r *Recorder) leaseTTL() time.Duration { return max(15*time.Second, 3*r.cfg.Interval) }

// Start takes a first step at once (so that an instance is listed, and an event charted, from
// its start), then one every Interval, until Stop or ctx ends; and turns admission steps into
// waits meanwhile.
func (r *Recorder) Start(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	sctx, cancel := context.WithTimeout(ctx, loop.DefaultStepTimeout)
	if err := r.Step(sctx); err != nil {
		r.cfg.Logger.Warn("history step failed", "err", err) // not fatal: the next step retries
	}
	cancel()
	r.loop.Start(ctx, "history", r.cfg.Interval, r.cfg.Logger, r.Step)
	go func() {
		defer close(r.done)
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-r.waits:
				_ = loop.Guard("time in queue", r.cfg.Logger, func() error { r.observe(ctx, s); return nil })
			}
		}
	}()
	return nil
}

// Stop ends the loops and waits for them. Safe before Start and twice. What this instance
// counted since its last step is not added (a few seconds of 429s and 503s).
func (r *Recorder) Stop(context.Context) error {
	r.stopOnce.Do(func() {
		r.loop.Stop()
		if r.cancel != nil {
			r.cancel()
			<-r.done
		}
	})
	return nil
}

// Step is one round: add this instance's counts, take or renew the history lease, beat, and
// sample when this instance holds the lease. It returns the first errors of each part
// (each part is tried whatever the others did).
func (r *Recorder) Step(ctx context.Context) error {
	evs := r.cfg.Events()
	known := make(map[string]bool, len(evs))
	epochs := make(map[string]string, len(evs))
	for _, e := range evs {
		known[e.ID] = true
		epochs[e.ID] = e.Epoch()
	}
	r.known.Store(&known)
	r.epochs.Store(&epochs)
	errs := []error{r.flush(ctx)}
	if r.cfg.Leases != nil {
		held, err := r.cfg.Leases.Lease(ctx, LeaseName, r.id, r.leaseTTL())
		r.sampler.Store(held && err == nil)
		errs = append(errs, err)
	}
	errs = append(errs, r.beat(ctx))
	if r.sampler.Load() {
		errs = append(errs, r.sample(ctx, evs))
	}
	r.sweep()
	return errors.Join(errs...)
}

// Count counts an answer of this instance on an event's routes: 429s and 503s are added to
// the event's shared counters at the next step (other statuses, and ids of no known event,
// are not counted: the map stays bounded whatever ids clients send).
func (r *Recorder) Count(eventID string, status int) {
	i := 0
	switch status {
	case http.StatusTooManyRequests:
	case http.StatusServiceUnavailable:
		i = 1
	default:
		return
	}
	if !r.isKnown(eventID) {
		return
	}
	r.mu.Lock()
	c := r.counts[eventID]
	if c == nil {
		c = new([2]int64)
		r.counts[eventID] = c
	}
	c[i]++
	r.mu.Unlock()
}

// isKnown reports whether eventID is an event (Config.Known, else the last step's list).
func (r *Recorder) isKnown(eventID string) bool {
	if r.cfg.Known != nil {
		return r.cfg.Known(eventID)
	}
	k := r.known.Load()
	return k != nil && (*k)[eventID]
}

// flush adds the counts to the store; what could not be added is kept for the next step
// (a store that was down comes back to the 503s it caused).
func (r *Recorder) flush(ctx context.Context) error {
	return errors.Join(r.flushAnswers(ctx), r.flushLives(ctx))
}

func (r *Recorder) flushAnswers(ctx context.Context) error {
	r.mu.Lock()
	pending := r.counts
	r.counts = map[string]*[2]int64{}
	r.mu.Unlock()
	var first error
	for ev, c := range pending {
		deltas := map[string]int64{}
		if c[0] > 0 {
			deltas[history.CounterRejected] = c[0]
		}
		if c[1] > 0 {
			deltas[history.CounterUnavailable] = c[1]
		}
		if err := r.cfg.Store.Add(ctx, history.EventSeries(ev), deltas); err != nil {
			if first == nil {
				first = err
			}
			r.mu.Lock()
			k := r.counts[ev]
			if k == nil {
				k = new([2]int64)
				r.counts[ev] = k
			}
			k[0], k[1] = k[0]+c[0], k[1]+c[1]
			r.mu.Unlock()
		}
	}
	return first
}

// beat records this instance's heartbeat (alive for three intervals) and keeps the list of
// those alive.
func (r *Recorder) beat(ctx context.Context) error {
	info := r.cfg.Info
	info.Sampler = r.sampler.Load()
	if r.cfg.Warnings != nil {
		info.Warnings = r.cfg.Warnings()
	}
	b, _ := json.Marshal(info) // plain fields: cannot fail
	alive, err := r.cfg.Store.Beat(ctx, r.id, string(b), 3*r.cfg.Interval)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.alive = alive
	r.mu.Unlock()
	return nil
}

// Instances returns the instances alive as of this instance's last beat (at most Interval old),
// by id. An instance whose info cannot be read is listed with its id alone.
func (r *Recorder) Instances() []Instance {
	r.mu.Lock()
	alive := r.alive
	r.mu.Unlock()
	out := make([]Instance, len(alive))
	for i, in := range alive {
		out[i] = Instance{ID: in.ID, Until: in.Until, Self: in.ID == r.id}
		_ = json.Unmarshal([]byte(in.Info), &out[i].Info)
	}
	return out
}

// sample appends a sample of every event and campaign (the sampler's part of a step). An event
// whose line is missing (being restored) is skipped; the first other error is returned.
func (r *Recorder) sample(ctx context.Context, evs []event.Event) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, e := range evs {
		keep(r.sampleEvent(ctx, e))
	}
	if r.cfg.CouponStats != nil && r.cfg.Campaigns != nil {
		for _, id := range r.cfg.Campaigns() {
			st, err := r.cfg.CouponStats(ctx, id)
			if errors.Is(err, coupon.ErrCampaignNotFound) {
				continue
			}
			if err != nil {
				keep(err)
				continue
			}
			s := history.CampaignSample{Stock: st.Stock, Entries: st.Entries, Issued: st.Issued, Rejected: st.Rejected, Taken: st.Taken}
			keep(r.cfg.Store.Append(ctx, history.CampaignSeries(id), st.Now, s.Encode(), r.cfg.Window))
		}
	}
	return first
}

func (r *Recorder) sampleEvent(ctx context.Context, e event.Event) error {
	st, err := r.cfg.Line.Stats(ctx, e.ID)
	if errors.Is(err, queue.ErrEventNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	r.lifecycle(e, st)
	s := history.EventSample{Generation: st.Generation, Waiting: st.Waiting, Active: st.Active, MaxActive: e.MaxActive,
		Serving: st.Serving, AdmittedTotal: st.AdmittedTotal, LastNumber: st.LastNumber, Paused: e.Paused,
		Life: history.LifeOf(e.Epoch()), VoidLeft: st.VoidLeft}
	if e.ForSale() && r.cfg.Sale != nil {
		if a, err := r.cfg.Sale.Counts(ctx, e.ID); err == nil { // no inventory yet: no sale figures
			s.Capacity, s.Sold, s.Held = a.Capacity, a.Sold, a.Held
		}
	}
	c, err := r.cfg.Store.Counters(ctx, history.EventSeries(e.ID))
	if err != nil {
		return err
	}
	s.Rejected, s.Unavailable = c[history.CounterRejected], c[history.CounterUnavailable]
	s.LeftWaiting, s.Unclaimed, s.SoldOut = st.LeftWaiting, st.Unclaimed, st.SoldOut
	lc, err := r.cfg.Store.Counters(ctx, history.LifeSeries(e.ID, e.Epoch()))
	if err != nil {
		return err
	}
	for i, kind := range history.RefusalKinds {
		s.Refusals[i] = lc[history.RefusalCounter(kind)]
	}
	if err := r.cfg.Store.Append(ctx, history.EventSeries(e.ID), st.Now, s.Encode(), r.cfg.Window); err != nil {
		return err
	}
	s.At = st.Now
	if err := r.archive(ctx, e, s, history.WaitsOf(lc)); err != nil {
		r.cfg.Logger.Warn("the long history did not take a sample", "event", e.ID, "err", err) // the store's window has it
	}
	cp := history.Checkpoint{At: st.Now, Generation: st.Generation, LastNumber: st.LastNumber}
	r.mu.Lock()
	prev, ok := r.clockAt[e.ID]
	r.mu.Unlock()
	if ok && (cp.At.Sub(prev.At) < ClockStep || (cp.Generation == prev.Generation && cp.LastNumber == prev.LastNumber)) {
		return nil // a minute has not passed, or nobody joined since
	}
	if err := r.cfg.Store.Append(ctx, history.ClockSeries(e.ID), st.Now, cp.Encode(), ClockWindow); err != nil {
		return err
	}
	r.mu.Lock()
	r.clockAt[e.ID] = cp
	r.mu.Unlock()
	return nil
}

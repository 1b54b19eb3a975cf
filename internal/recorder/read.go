package recorder

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/queue"
)

// cached is what this instance has read of one series: each read fetches only the samples
// newer than those it has, at most once a second, so that a console refreshing every few
// seconds and the admission steps' waits cost the store one small read each.
type cached struct {
	mu      sync.Mutex
	entries []history.Entry // ascending by At
	fetched time.Time       // when last read from the store (Config.Now)
	used    time.Time
}

// fresh is how old a cached series may be before a read asks the store for newer samples.
func (r *Recorder) fresh() time.Duration { return min(time.Second, r.cfg.Interval) }

// read returns the samples of series within keep of its newest.
func (r *Recorder) read(ctx context.Context, series string, keep time.Duration) ([]history.Entry, error) {
	r.mu.Lock()
	c := r.cache[series]
	if c == nil {
		c = &cached{}
		r.cache[series] = c
	}
	r.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := r.cfg.Now()
	c.used = now
	if c.fetched.IsZero() || now.Sub(c.fetched) >= r.fresh() {
		var since time.Time
		if n := len(c.entries); n > 0 {
			since = c.entries[n-1].At.Add(time.Millisecond)
		}
		more, err := r.cfg.Store.Range(ctx, series, since)
		if err != nil {
			return nil, err
		}
		c.entries, c.fetched = append(c.entries, more...), now
		if n := len(c.entries); n > 0 {
			cut := c.entries[n-1].At.Add(-keep)
			c.entries = c.entries[sort.Search(n, func(k int) bool { return !c.entries[k].At.Before(cut) }):]
		}
	}
	return slices.Clone(c.entries), nil
}

// sweep forgets the series nobody read for a window, and the number clocks of events gone.
func (r *Recorder) sweep() {
	now := r.cfg.Now()
	known := r.known.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.cache {
		c.mu.Lock()
		idle := now.Sub(c.used) > r.cfg.Window
		c.mu.Unlock()
		if idle {
			delete(r.cache, k)
		}
	}
	for id := range r.clockAt {
		if known != nil && !(*known)[id] {
			delete(r.clockAt, id)
		}
	}
	for id := range r.archived {
		if known != nil && !(*known)[id] {
			delete(r.archived, id)
		}
	}
	for k, c := range r.countersCache {
		if now.Sub(c.at) > r.cfg.Window {
			delete(r.countersCache, k)
		}
	}
}

// EventHistory is an event's recent past.
type EventHistory struct {
	Samples []history.EventSample // ascending by At
	Rates   []history.EventRates  // one per sample
	// Forecast is read from every sample kept, whatever since asked for.
	Forecast history.EventForecast
	// Last is the newest sample kept, whatever since asked for (nil: none).
	Last *history.EventSample
}

// Event returns the samples of e (of its life: history.SameLife) after since (all kept, for a
// zero since), their rates, and the forecast. Errors: the store's.
func (r *Recorder) Event(ctx context.Context, e event.Event, since time.Time) (EventHistory, error) {
	entries, err := r.read(ctx, history.EventSeries(e.ID), r.cfg.Window)
	if err != nil {
		return EventHistory{}, err
	}
	// An earlier life's samples (the event deleted and made again under its id) are not its.
	samples := history.SameLife(decodeAll(entries, history.DecodeEventSample), history.LifeOf(e.Epoch()))
	rates := history.Rates(samples)
	h := EventHistory{Forecast: history.ForecastEvent(e, samples, rates)}
	if n := len(samples); n > 0 {
		h.Last = &samples[n-1]
	}
	i := after(len(samples), func(k int) time.Time { return samples[k].At }, since)
	h.Samples, h.Rates = samples[i:], rates[i:]
	return h, nil
}

// decodeAll decodes the entries a decoder accepts (those of another format are skipped).
func decodeAll[S any](entries []history.Entry, decode func(history.Entry) (S, bool)) []S {
	out := make([]S, 0, len(entries))
	for _, en := range entries {
		if s, ok := decode(en); ok {
			out = append(out, s)
		}
	}
	return out
}

// after is the index of the first of n samples (ascending by at) after since.
func after(n int, at func(i int) time.Time, since time.Time) int {
	return sort.Search(n, func(k int) bool { return at(k).After(since) })
}

// CampaignHistory is a coupon campaign's recent past.
type CampaignHistory struct {
	Samples  []history.CampaignSample
	Rates    []history.CampaignRates
	Forecast history.CampaignForecast
}

// Campaign returns the samples of campaign id after since, their rates and the forecast.
// Errors: the store's.
func (r *Recorder) Campaign(ctx context.Context, id string, since time.Time) (CampaignHistory, error) {
	entries, err := r.read(ctx, history.CampaignSeries(id), r.cfg.Window)
	if err != nil {
		return CampaignHistory{}, err
	}
	samples := decodeAll(entries, history.DecodeCampaignSample)
	rates := history.RatesOfCampaign(samples)
	h := CampaignHistory{Forecast: history.ForecastCampaign(samples, rates)}
	i := after(len(samples), func(k int) time.Time { return samples[k].At }, since)
	h.Samples, h.Rates = samples[i:], rates[i:]
	return h, nil
}

// Admitted takes an admission step of this instance's processor (it returns at once; the
// waits are worked out on the recorder's own goroutine): each ticket it admitted is observed
// (Config.ObserveWait, and the event's measured waits, Waited) with its time in line, from its join time on the event's number clock (history.Clock: the
// samples' last numbers, and the clock series beyond the window) to the step's store time.
// Nothing is observed before the event has a sample, nor when 256 steps are already waiting
// (the store too slow to answer: the metric skips them rather than the processor waiting).
func (r *Recorder) Admitted(eventID string, res queue.AdmitResult) {
	if res.Admitted <= 0 {
		return
	}
	select {
	case r.waits <- admitStep{eventID, res}:
	default:
	}
}

// observe turns one admission step into waits.
func (r *Recorder) observe(ctx context.Context, s admitStep) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	entries, err := r.read(ctx, history.EventSeries(s.event), r.cfg.Window)
	if err != nil || len(entries) == 0 {
		return
	}
	var fine []history.Checkpoint
	var gen uint32
	for _, en := range entries {
		if x, ok := history.DecodeEventSample(en); ok {
			fine = append(fine, history.Checkpoint{At: x.At, Generation: x.Generation, LastNumber: x.LastNumber})
			gen = x.Generation
		}
	}
	if len(fine) == 0 {
		return
	}
	var long []history.Checkpoint
	if s.r.From <= fine[0].LastNumber { // some joined before the window
		if es, err := r.read(ctx, history.ClockSeries(s.event), ClockWindow); err == nil {
			long = decodeAll(es, history.DecodeCheckpoint)
		}
	}
	for _, w := range history.NewClock(gen, fine, long).Waits(s.r.From, s.r.To, s.r.Admitted, s.r.Now) {
		if r.cfg.ObserveWait != nil {
			r.cfg.ObserveWait(s.event, w)
		}
		r.Waited(s.event, w)
	}
}

package memstore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/history"
)

// History is the in-process history.Store of the embedded deployment (one instance: the series
// live as long as the process; they are not saved in the snapshot).
type History struct {
	now       func() time.Time
	mu        sync.Mutex
	series    map[string]*histSeries
	counters  map[string]*histCounters
	instances map[string]history.Instance
}

type histSeries struct {
	entries []history.Entry // ascending by At
	expires time.Time       // the series is gone from then on (Append's keep)
}

type histCounters struct {
	v       map[string]int64
	expires time.Time
}

var _ history.Store = (*History)(nil)

// NewHistory returns an empty history store on cfg's clock (Beat's and the expiries').
func NewHistory(cfg Config) *History {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &History{now: cfg.Now, series: map[string]*histSeries{}, counters: map[string]*histCounters{},
		instances: map[string]history.Instance{}}
}

// Append implements history.Store.
func (h *History) Append(ctx context.Context, series string, at time.Time, data string, keep time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	at = time.UnixMilli(at.UnixMilli()).UTC()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.live(series)
	if s == nil {
		s = &histSeries{}
		h.series[series] = s
	}
	i := sort.Search(len(s.entries), func(k int) bool { return s.entries[k].At.After(at) })
	for k := i - 1; k >= 0 && s.entries[k].At.Equal(at); k-- {
		if s.entries[k].Data == data {
			return nil // the same sample twice (a set, as Redis keeps it)
		}
	}
	s.entries = append(s.entries, history.Entry{})
	copy(s.entries[i+1:], s.entries[i:])
	s.entries[i] = history.Entry{At: at, Data: data}
	cut := at.Add(-keep)
	// Reslicing keeps the dropped head in the array until append grows it into a new one:
	// amortised O(1) per sample, where a copy per append would be O(samples).
	s.entries = s.entries[sort.Search(len(s.entries), func(k int) bool { return !s.entries[k].At.Before(cut) }):]
	s.expires = at.Add(keep)
	return nil
}

// live returns the series, or nil when it does not exist or expired (then it is removed).
// Called with h.mu held.
func (h *History) live(series string) *histSeries {
	s := h.series[series]
	if s != nil && !h.now().Before(s.expires) {
		delete(h.series, series)
		return nil
	}
	return s
}

// Range implements history.Store.
func (h *History) Range(ctx context.Context, series string, since time.Time) ([]history.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.live(series)
	if s == nil {
		return nil, nil
	}
	since = time.UnixMilli(since.UnixMilli()).UTC()
	i := sort.Search(len(s.entries), func(k int) bool { return !s.entries[k].At.Before(since) })
	return append([]history.Entry(nil), s.entries[i:]...), nil
}

// Add implements history.Store.
func (h *History) Add(ctx context.Context, series string, deltas map[string]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	c := h.counters[series]
	if c == nil || !now.Before(c.expires) {
		c = &histCounters{v: map[string]int64{}}
		h.counters[series] = c
	}
	for k, d := range deltas {
		c.v[k] += d
	}
	c.expires = now.Add(history.CountersTTL)
	return nil
}

// Counters implements history.Store.
func (h *History) Counters(ctx context.Context, series string) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	if c := h.counters[series]; c != nil && h.now().Before(c.expires) {
		for k, v := range c.v {
			out[k] = v
		}
	}
	return out, nil
}

// Beat implements history.Store.
func (h *History) Beat(ctx context.Context, id, info string, ttl time.Duration) ([]history.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.UnixMilli(h.now().UnixMilli()).UTC()
	h.instances[id] = history.Instance{ID: id, Info: info, Until: now.Add(ttl)}
	out := make([]history.Instance, 0, len(h.instances))
	for k, in := range h.instances {
		if !in.Until.After(now) {
			delete(h.instances, k)
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	// The series and counters nobody appends to any more (deleted events) go here, as Redis
	// expires them.
	for k := range h.series {
		h.live(k)
	}
	for k, c := range h.counters {
		if !now.Before(c.expires) {
			delete(h.counters, k)
		}
	}
	return out, nil
}

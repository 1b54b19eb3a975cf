package recorder

import (
	"context"
	"errors"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
)

// DefaultArchiveEvery is how often the sampler writes the bucket of the span in progress to
// the long history (Config.Archive): a bucket's figures are then at most this old, at two
// rows per event per write (a minute's and ten minutes').
const DefaultArchiveEvery = 15 * time.Second

// pruneEvery is how often the sampler drops the buckets past their keep.
const pruneEvery = time.Hour

// spanState is the sampler's view of one span in progress of one event.
type spanState struct {
	start      time.Time // the span's start (zero: none yet)
	waitingMax int64
	written    time.Time // when its bucket was last written (sample time; zero: never)
	dirty      bool      // a sample came after the last write
	// fell: the store's counts started again within the span (fell). Its bucket keeps the
	// last sample before, which the next span's counts, measured since, follow: a sample
	// after would lose the admissions before it (helper-83: 6 read 3 after a kill -9).
	fell bool
}

// fell reports whether the store's running counts went back from (prev, prevWaits) to (s,
// waits): the embedded process was killed or Redis restarted empty, and the counts started
// again (queue.Stats.AdmittedTotal is kept in the store only: docs/durability.md).
func fell(prev history.EventSample, prevWaits history.Waits, s history.EventSample, waits history.Waits) bool {
	return s.AdmittedTotal < prev.AdmittedTotal || waits.Count() < prevWaits.Count()
}

// archiving is the sampler's state of one event's long history: the spans in progress and
// the last sample, per history.Spans.
type archiving struct {
	epoch string
	spans []spanState
	last  history.EventSample
	waits history.Waits
}

// archive adds sample s of e, with the life's waits, to the long history: a span that ended
// gets its last sample written, the span in progress is written when it was never written or
// ArchiveEvery has passed since. An instance that takes the sampling over starts with what it
// samples (the buckets keep the later sample and the larger line, history.Archive), but where
// the store's counts fell since the bucket kept (a restart after a crash: fell), it leaves the
// span's bucket as it is.
func (r *Recorder) archive(ctx context.Context, e event.Event, s history.EventSample, waits history.Waits) error {
	if r.cfg.Archive == nil {
		return nil
	}
	r.mu.Lock()
	a := r.archived[e.ID]
	fresh := a == nil || a.epoch != e.Epoch()
	r.mu.Unlock()
	var kept []*history.Bucket // by span: the bucket in progress as kept, for a fresh start
	if fresh {
		kept = make([]*history.Bucket, len(history.Spans))
		for k, sp := range history.Spans {
			start := history.SpanStart(s.At, sp.Span)
			bs, err := r.cfg.Archive.Buckets(ctx, e.ID, e.Epoch(), sp.Span, start.Add(-time.Nanosecond))
			if err != nil {
				return err
			}
			for i := range bs {
				if bs[i].Start.Equal(start) {
					kept[k] = &bs[i]
				}
			}
		}
	}
	r.mu.Lock()
	a = r.archived[e.ID]
	if a == nil || a.epoch != e.Epoch() {
		a = &archiving{epoch: e.Epoch(), spans: make([]spanState, len(history.Spans))}
		r.archived[e.ID] = a
	}
	fellNow := !a.last.At.IsZero() && fell(a.last, a.waits, s, waits)
	var puts []history.Bucket
	for k, sp := range history.Spans {
		st := &a.spans[k]
		start := history.SpanStart(s.At, sp.Span)
		if !st.start.Equal(start) {
			if !st.start.IsZero() && st.dirty && !st.fell && start.After(st.start) {
				puts = append(puts, history.Bucket{Event: e.ID, Epoch: a.epoch, Span: sp.Span, Start: st.start, Sample: a.last,
					WaitingMax: st.waitingMax, Waits: a.waits})
			}
			*st = spanState{start: start}
			if kept != nil && kept[k] != nil && fell(kept[k].Sample, kept[k].Waits, s, waits) {
				st.fell = true // this instance started after the counts started again
			}
		} else if fellNow && !st.fell {
			// The counts started again within the span: its bucket keeps the last sample before.
			if st.dirty {
				puts = append(puts, history.Bucket{Event: e.ID, Epoch: a.epoch, Span: sp.Span, Start: st.start, Sample: a.last,
					WaitingMax: st.waitingMax, Waits: a.waits})
			}
			st.fell = true
		}
		st.waitingMax = max(st.waitingMax, s.Waiting)
		st.dirty = true
		if st.fell {
			continue
		}
		if st.written.IsZero() || s.At.Sub(st.written) >= r.cfg.ArchiveEvery {
			puts = append(puts, history.Bucket{Event: e.ID, Epoch: a.epoch, Span: sp.Span, Start: start, Sample: s,
				WaitingMax: st.waitingMax, Waits: waits})
			st.written, st.dirty = s.At, false
		}
	}
	a.last, a.waits = s, waits
	prune := s.At.Sub(r.pruned) >= pruneEvery
	if prune {
		r.pruned = s.At
	}
	r.mu.Unlock()
	var errs []error
	for _, b := range puts {
		errs = append(errs, r.cfg.Archive.PutBucket(ctx, b))
	}
	if prune {
		for _, sp := range history.Spans {
			errs = append(errs, r.cfg.Archive.PruneBuckets(ctx, sp.Span, s.At.Add(-sp.Keep)))
		}
	}
	return errors.Join(errs...)
}

// LongHistory returns e's long history at span (history.MinuteSpan or TenMinuteSpan): the last
// sample of each bucket after since, their rates and each bucket's longest line, with the
// forecast and the life's figures of the store's window (Event). Errors: the database's, the
// store's; ErrNoArchive without Config.Archive.
func (r *Recorder) LongHistory(ctx context.Context, e event.Event, span time.Duration, since time.Time) (EventHistory, []int64, error) {
	if r.cfg.Archive == nil {
		return EventHistory{}, nil, ErrNoArchive
	}
	live, err := r.Event(ctx, e, endOfTime) // the forecast and the last sample only
	if err != nil {
		return EventHistory{}, nil, err
	}
	bs, err := r.cfg.Archive.Buckets(ctx, e.ID, e.Epoch(), span, time.Time{})
	if err != nil {
		return EventHistory{}, nil, err
	}
	samples := make([]history.EventSample, len(bs))
	maxima := make([]int64, len(bs))
	for i, b := range bs {
		samples[i], maxima[i] = b.Sample, b.WaitingMax
	}
	rates := history.Rates(samples)
	i := after(len(samples), func(k int) time.Time { return samples[k].At }, since)
	h := EventHistory{Samples: samples[i:], Rates: rates[i:], Forecast: live.Forecast, Last: live.Last}
	return h, maxima[i:], nil
}

// endOfTime is after every sample.
var endOfTime = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrNoArchive: the recorder keeps no long history (Config.Archive nil).
var ErrNoArchive = errors.New("recorder: no long history")

// LifeHistory is what the history holds of an event's life (the report after the sale,
// package report): its samples, the long history's before the store's window and the
// window's within it; the long history's span and buckets (of the minute when the event was
// created within a day, of ten minutes after); and what was measured of the life.
type LifeHistory struct {
	Points  []history.EventSample
	Span    time.Duration
	Buckets []history.Bucket
	Life    Life
}

// EventLifeHistory gathers e's LifeHistory. Errors: the store's, the database's.
func (r *Recorder) EventLifeHistory(ctx context.Context, e event.Event) (LifeHistory, error) {
	live, err := r.Event(ctx, e, time.Time{})
	if err != nil {
		return LifeHistory{}, err
	}
	life, err := r.EventLife(ctx, e.ID, e.Epoch())
	if err != nil {
		return LifeHistory{}, err
	}
	lh := LifeHistory{Span: history.MinuteSpan, Life: life}
	if e.CreatedAt.IsZero() || r.cfg.Now().Sub(e.CreatedAt) > history.MinuteKeep {
		lh.Span = history.TenMinuteSpan
	}
	if r.cfg.Archive != nil {
		if lh.Buckets, err = r.cfg.Archive.Buckets(ctx, e.ID, e.Epoch(), lh.Span, time.Time{}); err != nil {
			return LifeHistory{}, err
		}
	}
	for _, b := range lh.Buckets {
		if len(live.Samples) > 0 && !b.Sample.At.Before(live.Samples[0].At) {
			break
		}
		lh.Points = append(lh.Points, b.Sample)
	}
	lh.Points = append(lh.Points, live.Samples...)
	return lh, nil
}

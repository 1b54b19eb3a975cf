package recorder

import (
	"context"
	"errors"
	"time"

	"github.com/waitroom/waitroom/internal/history"
)

// lifeCounts are what this instance counted of one event's life since its last step: the
// refusals of the line's rules by kind (history.RefusalKinds' order) and the measured waits.
type lifeCounts struct {
	refusals [4]int64
	waits    history.Waits
}

// Refused counts a refusal answered with a problem code of the line's rules in the event's
// history (line.History): the codes of history.RefusalKind are added up by kind in the
// event's life counters at the next step; other codes, and ids of no known event, are not
// counted.
func (r *Recorder) Refused(eventID, code string) {
	kind, ok := history.RefusalKind(code)
	if !ok || !r.isKnown(eventID) {
		return
	}
	i := 0
	for i < len(history.RefusalKinds) && history.RefusalKinds[i] != kind {
		i++
	}
	r.mu.Lock()
	r.life(eventID).refusals[i]++
	r.mu.Unlock()
}

// Waited counts an admission's time in line (line.History; the admission processor's steps
// are counted by Admitted): added to the event's life counters at the next step, so that the
// fleet's waits add up whichever instance admitted.
func (r *Recorder) Waited(eventID string, wait time.Duration) {
	if !r.isKnown(eventID) {
		return
	}
	r.mu.Lock()
	r.life(eventID).waits[history.WaitBucket(wait)]++
	r.mu.Unlock()
}

// life is eventID's counts (r.mu held).
func (r *Recorder) life(eventID string) *lifeCounts {
	c := r.lives[eventID]
	if c == nil {
		c = &lifeCounts{waits: history.Waits{}}
		r.lives[eventID] = c
	}
	return c
}

// flushLives adds the lives' counts to the store, under the life each event has as of this
// step (an event gone since is dropped); what could not be added is kept for the next step.
func (r *Recorder) flushLives(ctx context.Context) error {
	r.mu.Lock()
	pending := r.lives
	r.lives = map[string]*lifeCounts{}
	r.mu.Unlock()
	epochs := r.epochs.Load()
	var errs []error
	for ev, c := range pending {
		epoch, ok := "", false
		if epochs != nil {
			epoch, ok = (*epochs)[ev]
		}
		if !ok {
			continue
		}
		deltas := map[string]int64{}
		for i, kind := range history.RefusalKinds {
			if c.refusals[i] > 0 {
				deltas[history.RefusalCounter(kind)] = c.refusals[i]
			}
		}
		c.waits.Counters(deltas)
		if len(deltas) == 0 {
			continue
		}
		if err := r.cfg.Store.Add(ctx, history.LifeSeries(ev, epoch), deltas); err != nil {
			if len(errs) == 0 {
				errs = append(errs, err)
			}
			r.mu.Lock()
			k := r.life(ev)
			for i := range k.refusals {
				k.refusals[i] += c.refusals[i]
			}
			k.waits.Add(c.waits)
			r.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// Life is what was measured of one life of an event, summed over the fleet: the times in
// line of its admissions and its refusals by kind (history.RefusalKinds' order).
type Life struct {
	Waits    history.Waits
	Refusals [4]int64
}

// EventLife returns the measured figures of the current life of the event with that id and
// epoch (event.Event.Epoch), as the shared counters hold them (at most a second old: read
// once a second at most). Errors: the store's.
func (r *Recorder) EventLife(ctx context.Context, id, epoch string) (Life, error) {
	c, err := r.counters(ctx, history.LifeSeries(id, epoch))
	if err != nil {
		return Life{}, err
	}
	l := Life{Waits: history.WaitsOf(c)}
	for i, kind := range history.RefusalKinds {
		l.Refusals[i] = c[history.RefusalCounter(kind)]
	}
	return l, nil
}

// countersRead is a series' counters as last read, and when.
type countersRead struct {
	at time.Time
	c  map[string]int64
}

// counters reads a series' counters, at most once per fresh() (the console refreshes every
// few seconds from any number of tabs).
func (r *Recorder) counters(ctx context.Context, series string) (map[string]int64, error) {
	now := r.cfg.Now()
	r.mu.Lock()
	got, ok := r.countersCache[series]
	r.mu.Unlock()
	if ok && now.Sub(got.at) < r.fresh() {
		return got.c, nil
	}
	c, err := r.cfg.Store.Counters(ctx, series)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.countersCache == nil {
		r.countersCache = map[string]countersRead{}
	}
	r.countersCache[series] = countersRead{at: now, c: c}
	r.mu.Unlock()
	return c, nil
}

// Package registry keeps the events: their configuration (event.Event) lives in SQL, the
// source of truth, and is written through to the line store that enforces it; a Registry on
// every instance caches the list and re-applies changed configurations to the store every
// second, so that a change made on one instance holds everywhere within a second and a store
// that lost its data (a Redis restart) gets its lines back, under a new generation, without an
// operator.
package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// ErrNotFound is returned for an event that does not exist: event.ErrNotFound, the sentinel
// the SQL store returns, under the name the registry's callers know.
var ErrNotFound = event.ErrNotFound

// Config configures a Registry.
type Config struct {
	DB    *sqlstore.DB // required
	Store queue.Store  // required
	// SyncInterval is how often the cache is reloaded from SQL and written to the store.
	// Defaults to 1 s.
	SyncInterval time.Duration
	Logger       *slog.Logger // defaults to slog.Default()
	// DeleteSale removes what the sale's store keeps of an event (inventory, holds, the sold
	// state: sale.Store.DeleteInventory) when the event is deleted. Nil: the event has no sale
	// to remove. Without it an event deleted and made again before the sale's sync noticed the
	// gap would start its new life with the old one's sold units.
	DeleteSale func(ctx context.Context, id string) error
}

// Registry is the events of one instance. It is safe for concurrent use.
type Registry struct {
	cfg    Config
	mu     sync.RWMutex
	events map[string]event.Event
	// written is the Version of the configuration this instance last wrote to the store, per
	// event: the sync writes only what changed, so N instances cost the store nothing per
	// second once configurations settle.
	written map[string]int64
	// marked is the last checkpoint of each line's numbers this instance wrote to SQL
	// (sqlstore.DB.Mark): seq, serving.
	marked map[string][2]int64
	// owed is the owed queue (queue.Stats.Owed) this instance last wrote to SQL, per event.
	owed map[string][]int64
	// effective are the limits the controllers of events in admission mode auto chose
	// (SetEffective): what Get, Cached and List give as MaxActive and AdmitRate for them.
	effective map[string]limits

	loop loop.Loop
}

type limits struct {
	maxActive int64
	admitRate float64
}

// SetEffective records the effective limits of an event in admission mode auto (package
// autoadmit's controller state, read by every instance every second), so that whoever reads the
// event (ETAs, the console, the page) sees the limits the line enforces.
func (r *Registry) SetEffective(id string, maxActive int64, admitRate float64) {
	r.mu.Lock()
	r.effective[id] = limits{maxActive, admitRate}
	r.mu.Unlock()
}

// Effective returns e with the limits in force: in admission mode auto, the controller's last
// max_active and admit_rate (as reads show them), else e as it is.
func (r *Registry) Effective(e event.Event) event.Event {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.overlay(e)
}

// overlay gives e the effective limits of mode auto. Called with mu held.
func (r *Registry) overlay(e event.Event) event.Event {
	if e.Auto.Enabled {
		if l, ok := r.effective[e.ID]; ok {
			e.MaxActive, e.AdmitRate = l.maxActive, l.admitRate
		}
	}
	return e
}

// New returns a Registry; call Start to begin syncing.
func New(cfg Config) (*Registry, error) {
	if cfg.DB == nil || cfg.Store == nil {
		return nil, errors.New("event: Config.DB and Config.Store are required")
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Registry{cfg: cfg, events: make(map[string]event.Event), written: make(map[string]int64), marked: make(map[string][2]int64), owed: make(map[string][]int64),
		effective: make(map[string]limits)}, nil
}

// newGeneration returns a random non-zero line generation.
func newGeneration() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if g := binary.BigEndian.Uint32(b[:]); g != 0 {
			return g
		}
	}
}

// Put validates e (with its defaults), stores it in SQL and writes it through to the store.
// With ifVersion > 0 it writes only over that stored version; with event.CreateOnly it only
// creates (sqlstore.PutEventIf).
// Errors: a validation error (wrapped in *InvalidError), *event.DropError,
// *event.VersionError, or the database's or store's.
func (r *Registry) Put(ctx context.Context, e event.Event, ifVersion int64) (stored event.Event, created bool, err error) {
	e = e.WithDefaults()
	if err := e.Validate(); err != nil {
		return event.Event{}, false, &InvalidError{Err: err}
	}
	stored, created, err = r.cfg.DB.PutEventIf(ctx, e, ifVersion)
	if err != nil {
		return event.Event{}, false, err
	}
	if err := r.writeLine(ctx, stored); err != nil {
		return event.Event{}, false, err
	}
	r.mu.Lock()
	r.cache(stored)
	r.written[stored.ID] = stored.Version
	r.mu.Unlock()
	return stored, created, nil
}

// cache records e as its event's cached configuration, unless the cache holds a later version
// of the same life: writes racing on one event finish in any order, and the one that finished
// last had left the cache with an older version than SQL's until the next sync (GET answered
// it: TestConcurrentPatchesAllApply lost admit_rate 3 under load). Called with mu held.
func (r *Registry) cache(e event.Event) {
	if cur, ok := r.events[e.ID]; ok && cur.Epoch() == e.Epoch() && cur.Version > e.Version {
		return
	}
	r.events[e.ID] = e
}

// ErrInvalid is matched by *InvalidError.
var ErrInvalid = errors.New("invalid event configuration")

// InvalidError is a configuration the store cannot enforce. It matches ErrInvalid.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Get returns an event from the cache, reading SQL on a miss. Errors: ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (event.Event, error) {
	r.mu.RLock()
	e, ok := r.events[id]
	if ok {
		e = r.overlay(e)
	}
	r.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := r.cfg.DB.GetEvent(ctx, id)
	if err != nil {
		return event.Event{}, err
	}
	r.mu.Lock()
	r.cache(e)
	e = r.overlay(r.events[id])
	r.mu.Unlock()
	return e, nil
}

// Fresh returns an event as SQL holds it now (not the cache), for a read-modify-write.
// Errors: ErrNotFound, or the database's.
func (r *Registry) Fresh(ctx context.Context, id string) (event.Event, error) {
	return r.cfg.DB.GetEvent(ctx, id)
}

// Delete removes an event from SQL, its line from the store and its sale (Config.DeleteSale),
// confirmed bookings included, so that an event made again under the same id starts with
// nothing of the old one: no ticket, no hold, nothing sold. Errors: ErrNotFound, or the
// database's or stores'.
func (r *Registry) Delete(ctx context.Context, id string) error { return r.DeleteIf(ctx, id, 0, true) }

// DeleteIf is Delete of the stored version ifVersion only (0: whatever version), and, unless
// dropSold, only while the event has no confirmed booking: the checks and the delete are one
// SQL transaction. Errors: Delete's, *event.VersionError when another version is stored, or
// none, and *event.DropError (Deleted) when it has confirmed bookings and not dropSold.
func (r *Registry) DeleteIf(ctx context.Context, id string, ifVersion int64, dropSold bool) error {
	deleted, err := r.cfg.DB.DeleteEventIf(ctx, id, ifVersion, dropSold)
	if err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.events, id)
	r.mu.Unlock()
	if err := r.cfg.Store.DeleteEvent(ctx, id); err != nil {
		return err
	}
	if r.cfg.DeleteSale != nil {
		if err := r.cfg.DeleteSale(ctx, id); err != nil {
			return err
		}
	}
	if !deleted {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return nil
}

// List returns the cached events (as of the last sync or local change).
func (r *Registry) List() []event.Event {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]event.Event, 0, len(r.events))
	for _, e := range r.events {
		out = append(out, r.overlay(e))
	}
	return out
}

// Sync reloads every event from SQL and writes each configuration that changed since this
// instance last wrote it to the store. A line the store lost is re-created on demand (Restore:
// a request or the admission processor that finds it missing) under a new generation, so no old
// ticket id can name a new ticket.
func (r *Registry) Sync(ctx context.Context) error {
	all, err := r.cfg.DB.ListEvents(ctx)
	if err != nil {
		return err
	}
	fresh := make(map[string]event.Event, len(all))
	var errs []error
	for _, e := range all {
		fresh[e.ID] = e
		r.mu.RLock()
		done := r.written[e.ID] == e.Version
		r.mu.RUnlock()
		if done {
			continue // this version is in the store already; a lost line is restored on demand
		}
		// Update only: the sync never creates a line, so it cannot bring back one that a
		// concurrent DELETE on another instance just removed.
		_, err := r.cfg.Store.PutEvent(ctx, e.LineConfig(), 0)
		if err != nil && !errors.Is(err, queue.ErrEventNotFound) {
			errs = append(errs, fmt.Errorf("event %s: %w", e.ID, err))
			continue
		}
		r.mu.Lock()
		r.written[e.ID] = e.Version
		r.mu.Unlock()
	}
	r.mu.Lock()
	for id, e := range fresh { // a write that finished since the list was read stays
		if cur, ok := r.events[id]; ok && cur.Epoch() == e.Epoch() && cur.Version > e.Version {
			fresh[id] = cur
		}
	}
	r.events = fresh
	for id := range r.written {
		if _, ok := fresh[id]; !ok {
			delete(r.written, id)
		}
	}
	for id := range r.marked {
		if _, ok := fresh[id]; !ok {
			delete(r.marked, id)
			delete(r.owed, id)
		}
	}
	for id := range r.effective {
		if e, ok := fresh[id]; !ok || !e.Auto.Enabled {
			delete(r.effective, id)
		}
	}
	r.mu.Unlock()
	for _, e := range all {
		if err := r.mark(ctx, e.ID); err != nil {
			errs = append(errs, fmt.Errorf("event %s: checkpoint: %w", e.ID, err))
		}
	}
	return errors.Join(errs...)
}

// mark checkpoints the line's numbers in SQL (queue.LineRecord's marks) when they moved since
// this instance last did: after a store loss, tickets up to the seq mark keep their places
// and are not taken for numbers that were never handed out (docs/durability.md).
func (r *Registry) mark(ctx context.Context, id string) error {
	st, err := r.cfg.Store.Stats(ctx, id)
	if errors.Is(err, queue.ErrEventNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := [2]int64{st.SeqMark(), st.Serving} // not past void numbers: queue.Stats.SeqMark
	r.mu.RLock()
	last, lastOwed := r.marked[id], r.owed[id]
	r.mu.RUnlock()
	if now != last {
		if err := r.cfg.DB.Mark(ctx, id, now[0], now[1]); err != nil {
			return err
		}
		r.mu.Lock()
		r.marked[id] = now
		r.mu.Unlock()
	}
	if !slices.Equal(st.Owed, lastOwed) {
		// The owed queue, so that a resume keeps those in it owed (queue.LineRecord.Owed).
		if err := r.cfg.DB.MarkOwed(ctx, id, st.Owed); err != nil {
			return err
		}
		r.mu.Lock()
		r.owed[id] = st.Owed
		r.mu.Unlock()
	}
	return nil
}

// Start syncs once, then every SyncInterval until Stop or ctx ends. The first sync's error is
// returned (the instance should not serve without its events); it is bounded by
// loop.DefaultStepTimeout, like every later one, so a database that never answers fails the
// start instead of hanging it.
func (r *Registry) Start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, loop.DefaultStepTimeout)
	err := r.Sync(sctx)
	cancel()
	if err != nil {
		return err
	}
	r.loop.Start(ctx, "event sync", r.cfg.SyncInterval, r.cfg.Logger, r.Sync)
	return nil
}

// Stop ends the sync loop and waits for it. Safe before Start and more than once.
func (r *Registry) Stop(context.Context) error {
	r.loop.Stop()
	return nil
}

// Restore writes a known event's configuration to the store again, re-creating its line (under
// a new generation) if the store lost it. Errors: ErrNotFound, or the store's.
//
// It reads the database, not the cache: an event deleted on another instance must not be
// brought back by a stale cache entry here.
func (r *Registry) Restore(ctx context.Context, id string) error {
	e, err := r.cfg.DB.GetEvent(ctx, id)
	if errors.Is(err, ErrNotFound) {
		r.mu.Lock()
		delete(r.events, id)
		r.mu.Unlock()
		return err
	}
	if err != nil {
		return err
	}
	return r.writeLine(ctx, e)
}

// writeLine writes e to the store, creating its line under a new generation if missing, then
// checks that e still exists in SQL and removes the line if not. A DELETE deletes SQL first and
// the store second, so with this order (store first, SQL second) one of the two always sees the
// other's work: a deleted event never keeps a line.
func (r *Registry) writeLine(ctx context.Context, e event.Event) error {
	if _, err := r.cfg.Store.PutEvent(ctx, e.LineConfig(), newGeneration()); err != nil {
		return err
	}
	if _, err := r.cfg.DB.GetEvent(ctx, e.ID); errors.Is(err, ErrNotFound) {
		r.mu.Lock()
		delete(r.events, e.ID)
		delete(r.written, e.ID)
		r.mu.Unlock()
		if err := r.cfg.Store.DeleteEvent(ctx, e.ID); err != nil {
			return err
		}
		return fmt.Errorf("%w (deleted meanwhile)", err)
	} else if err != nil {
		return err
	}
	return nil
}

// Cached returns an event from the cache only (no I/O), for hot paths.
func (r *Registry) Cached(id string) (event.Event, bool) {
	r.mu.RLock()
	e, ok := r.events[id]
	if ok && e.Auto.Enabled {
		e = r.overlay(e)
	}
	r.mu.RUnlock()
	return e, ok
}

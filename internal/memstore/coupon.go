package memstore

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
)

// Coupons is the in-process coupon.Store of the embedded deployment: the same entry order,
// ceiling, leases and first-outcome-wins records as the Redis store, under one mutex per
// campaign. A graceful stop saves it (Snapshot) and the next start restores it; after a crash
// the service restores it from the database (docs/durability.md).
type Coupons struct {
	now  func() time.Time
	mu   sync.Mutex
	camp map[string]*campaign
}

var _ coupon.Store = (*Coupons)(nil)

// NewCoupons returns an empty coupon store; cfg.Now is its clock (default time.Now).
func NewCoupons(cfg Config) *Coupons {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Coupons{now: cfg.Now, camp: map[string]*campaign{}}
}

// memEntry is one entry: its user, and whether the database is known to hold it.
type memEntry struct {
	userID      string
	unconfirmed bool
}

type campaign struct {
	mu       sync.Mutex
	cfg      coupon.Campaign
	inc      string
	seq      int64
	ceil     int64
	admitted int64
	users    map[string]int64 // user key -> entry number
	entries  map[int64]*memEntry
	// queue holds the waiting entry numbers in ascending order, and maybe numbers no longer
	// waiting (removed lazily); queued is the truth.
	queue    []int64
	queued   map[int64]bool
	taken    map[int64]int64  // entry number -> lease expiry (unix ms)
	results  map[int64]string // entry number -> code ("" = rejected)
	queuedAt map[int64]int64  // entry number -> when it was queued (unix ms), until recorded
}

func (cs *Coupons) get(id string) (*campaign, error) {
	cs.mu.Lock()
	c := cs.camp[id]
	cs.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, id)
	}
	return c, nil
}

// newIncarnation returns a random name for a copy of a campaign.
func newIncarnation() string { return rand.Text() }

// PutCampaign implements coupon.Store.
func (cs *Coupons) PutCampaign(_ context.Context, cfg coupon.Campaign) (bool, error) {
	cs.mu.Lock()
	c := cs.camp[cfg.ID]
	created := c == nil
	if created {
		c = &campaign{inc: newIncarnation(), users: map[string]int64{}, entries: map[int64]*memEntry{},
			queued: map[int64]bool{}, taken: map[int64]int64{}, results: map[int64]string{}, queuedAt: map[int64]int64{}}
		cs.camp[cfg.ID] = c
	}
	cs.mu.Unlock()
	c.mu.Lock()
	c.cfg = cfg
	c.mu.Unlock()
	return created, nil
}

// DeleteCampaign implements coupon.Store.
func (cs *Coupons) DeleteCampaign(_ context.Context, id string) error {
	cs.mu.Lock()
	delete(cs.camp, id)
	cs.mu.Unlock()
	return nil
}

func (c *campaign) entry(n int64) coupon.Entry {
	me := c.entries[n]
	e := coupon.Entry{Campaign: c.cfg.ID, UserID: me.userID, Number: n, Status: coupon.StatusPending, Unconfirmed: me.unconfirmed}
	if code, ok := c.results[n]; ok {
		e.Status, e.Code = coupon.StatusIssued, code
		if code == "" {
			e.Status = coupon.StatusRejected
		}
	}
	return e
}

// Enter implements coupon.Store.
func (cs *Coupons) Enter(_ context.Context, id, userKey, userID string) (coupon.EnterResult, error) {
	c, err := cs.get(id)
	if err != nil {
		return coupon.EnterResult{}, err
	}
	now := cs.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.users[userKey]; ok && c.entries[n] != nil && c.entries[n].userID == userID {
		return coupon.EnterResult{Entry: c.entry(n)}, nil
	}
	if !c.cfg.OpensAt.IsZero() && now.Before(c.cfg.OpensAt) {
		return coupon.EnterResult{}, &coupon.NotOpenError{OpensAt: c.cfg.OpensAt}
	}
	if c.seq >= c.ceil {
		return coupon.EnterResult{}, &coupon.CeilingError{Seq: c.seq, Ceiling: c.ceil, Incarnation: c.inc}
	}
	c.seq++
	n := c.seq
	c.users[userKey] = n
	c.entries[n] = &memEntry{userID: userID, unconfirmed: true}
	if c.admitted >= c.cfg.Stock {
		c.results[n] = ""
	} else {
		c.admitted++
		c.enqueue(n)
		c.queuedAt[n] = now.UnixMilli()
	}
	r := coupon.EnterResult{Entry: c.entry(n), Created: true}
	if 2*(c.ceil-n) < coupon.BlockSize {
		r.Refill, r.Incarnation = c.ceil, c.inc
	}
	return r, nil
}

// Entry implements coupon.Store.
func (cs *Coupons) Entry(_ context.Context, id, userKey, userID string) (coupon.Entry, error) {
	c, err := cs.get(id)
	if err != nil {
		return coupon.Entry{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.users[userKey]
	if !ok || c.entries[n] == nil || c.entries[n].userID != userID {
		return coupon.Entry{}, coupon.ErrEntryNotFound
	}
	return c.entry(n), nil
}

// RaiseCeiling implements coupon.Store.
func (cs *Coupons) RaiseCeiling(_ context.Context, id string, b coupon.Block) (bool, error) {
	c, err := cs.get(id)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.Incarnation != c.inc || b.Lo < c.ceil || b.Hi <= b.Lo {
		return false, nil
	}
	if b.Lo > c.ceil {
		c.seq = b.Lo
	}
	c.ceil = b.Hi
	return true, nil
}

// RecoverCampaign implements coupon.Store.
func (cs *Coupons) RecoverCampaign(_ context.Context, id string, r coupon.Recovery) error {
	c, err := cs.get(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq = max(c.seq, r.Floor)
	c.ceil = max(c.ceil, c.seq)
	c.admitted = r.Admitted
	return nil
}

// enqueue queues entry n.
func (c *campaign) enqueue(n int64) {
	if c.queued[n] {
		return
	}
	c.queued[n] = true
	if i, found := slices.BinarySearch(c.queue, n); !found {
		c.queue = slices.Insert(c.queue, i, n)
	}
}

// drop removes entry n (made by the store after a loss; the database gives it to nobody, or
// gives its user another number). Admitted goes down by one whatever the entry was: an
// undercount is harmless (see coupon.Counters), an overcount is not.
func (c *campaign) drop(n int64) {
	c.admitted = max(0, c.admitted-1)
	delete(c.entries, n)
	delete(c.results, n)
	delete(c.queued, n)
	delete(c.taken, n)
	delete(c.queuedAt, n)
}

// RestoreEntries implements coupon.Store.
func (cs *Coupons) RestoreEntries(_ context.Context, id string, facts []coupon.Fact) error {
	c, err := cs.get(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range facts {
		n := f.Entry.Number
		if old, ok := c.users[f.UserKey]; ok && old != n {
			if me := c.entries[old]; me != nil && me.userID == f.Entry.UserID {
				c.drop(old)
			}
		}
		if me := c.entries[n]; me != nil && me.userID != f.Entry.UserID {
			delete(c.results, n)  // that user's outcome, not this one's (its key may still name n)
			delete(c.taken, n)    // and that user's lease
			delete(c.queuedAt, n) // and its entry time
		}
		c.users[f.UserKey] = n
		c.entries[n] = &memEntry{userID: f.Entry.UserID}
		switch f.Entry.Status {
		case coupon.StatusIssued:
			c.results[n] = f.Entry.Code
			delete(c.queued, n)
			delete(c.queuedAt, n)
		case coupon.StatusRejected:
			c.results[n] = ""
			delete(c.queued, n)
			delete(c.queuedAt, n)
		default:
			_, decided := c.results[n]
			_, taken := c.taken[n]
			if !decided && !taken {
				c.enqueue(n)
			}
		}
	}
	return nil
}

// ConfirmEntries implements coupon.Store.
func (cs *Coupons) ConfirmEntries(_ context.Context, id string, facts []coupon.Fact) error {
	c, err := cs.get(id)
	if err != nil {
		return nil // nothing to confirm, as in Redis
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range facts {
		n := f.Entry.Number
		if me := c.entries[n]; me != nil && c.users[f.UserKey] == n && me.userID == f.Entry.UserID {
			me.unconfirmed = false
		}
	}
	return nil
}

// Take implements coupon.Store.
func (cs *Coupons) Take(ctx context.Context, id string, n int, lease time.Duration) ([]coupon.Task, error) {
	if err := ctx.Err(); err != nil { // as a network store would: a dead caller changes nothing
		return nil, err
	}
	c, err := cs.get(id)
	if err != nil {
		return nil, err
	}
	now := cs.now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	var expired []int64
	for m, exp := range c.taken {
		if exp <= now {
			expired = append(expired, m)
		}
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i] < expired[j] })
	var got []int64
	for _, m := range expired {
		if len(got) == n {
			break
		}
		if _, decided := c.results[m]; decided {
			delete(c.taken, m)
			continue
		}
		got = append(got, m)
	}
	for len(got) < n && len(c.queue) > 0 {
		m := c.queue[0]
		c.queue = c.queue[1:]
		if !c.queued[m] {
			continue // removed since
		}
		delete(c.queued, m)
		if _, decided := c.results[m]; !decided {
			got = append(got, m)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	tasks := make([]coupon.Task, len(got))
	for i, m := range got {
		c.taken[m] = now + lease.Milliseconds()
		tasks[i] = coupon.Task{Number: m, UserID: c.entries[m].userID, Waited: -time.Millisecond}
		if at, ok := c.queuedAt[m]; ok {
			tasks[i].Waited = time.Duration(now-at) * time.Millisecond
		}
	}
	return tasks, nil
}

// Record implements coupon.Store.
func (cs *Coupons) Record(ctx context.Context, id string, outcomes []coupon.Outcome) ([]coupon.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := cs.get(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var refused []coupon.Outcome
	for _, o := range outcomes {
		me := c.entries[o.Number]
		if me == nil || me.userID != o.UserID {
			refused = append(refused, o) // its lease ended when the number changed hands
			continue
		}
		delete(c.taken, o.Number)
		delete(c.queued, o.Number)
		delete(c.queuedAt, o.Number)
		if _, done := c.results[o.Number]; !done {
			c.results[o.Number] = o.Code
		}
	}
	return refused, nil
}

// CampaignCounters implements coupon.Store.
func (cs *Coupons) CampaignCounters(_ context.Context, id string) (coupon.Counters, error) {
	c, err := cs.get(id)
	if err != nil {
		return coupon.Counters{}, err
	}
	now := queue.FromMS(cs.now().UnixMilli())
	c.mu.Lock()
	defer c.mu.Unlock()
	return coupon.Counters{Stock: c.cfg.Stock, Seq: c.seq, Ceiling: c.ceil, Admitted: c.admitted,
		Queued: int64(len(c.queued)), Taken: int64(len(c.taken)), Incarnation: c.inc, Now: now}, nil
}

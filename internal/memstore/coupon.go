package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
)

// Coupons is the in-process coupon.Store of the embedded deployment: the same entry order,
// leases and first-outcome-wins records as the Redis store, under one mutex per campaign.
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

type campaign struct {
	mu       sync.Mutex
	cfg      coupon.Campaign
	seq      int64
	users    map[string]int64 // user key -> entry number
	userIDs  map[int64]string
	queue    []int64          // waiting entry numbers, ascending
	taken    map[int64]int64  // entry number -> lease expiry (unix ms)
	results  map[int64]string // entry number -> code ("" = rejected)
	queuedAt map[int64]int64  // entry number -> when it was queued (unix ms), until recorded
	issued   int64
	rejected int64
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

// PutCampaign implements coupon.Store.
func (cs *Coupons) PutCampaign(_ context.Context, cfg coupon.Campaign) error {
	cs.mu.Lock()
	c := cs.camp[cfg.ID]
	if c == nil {
		c = &campaign{users: map[string]int64{}, userIDs: map[int64]string{}, taken: map[int64]int64{}, results: map[int64]string{},
			queuedAt: map[int64]int64{}}
		cs.camp[cfg.ID] = c
	}
	cs.mu.Unlock()
	c.mu.Lock()
	c.cfg = cfg
	c.mu.Unlock()
	return nil
}

// DeleteCampaign implements coupon.Store.
func (cs *Coupons) DeleteCampaign(_ context.Context, id string) error {
	cs.mu.Lock()
	delete(cs.camp, id)
	cs.mu.Unlock()
	return nil
}

func (c *campaign) entry(n int64) coupon.Entry {
	e := coupon.Entry{Campaign: c.cfg.ID, UserID: c.userIDs[n], Number: n, Status: coupon.StatusPending}
	if code, ok := c.results[n]; ok {
		e.Status, e.Code = coupon.StatusIssued, code
		if code == "" {
			e.Status = coupon.StatusRejected
		}
	}
	return e
}

// Enter implements coupon.Store.
func (cs *Coupons) Enter(_ context.Context, id, userKey, userID string) (coupon.Entry, bool, error) {
	c, err := cs.get(id)
	if err != nil {
		return coupon.Entry{}, false, err
	}
	now := cs.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.users[userKey]; ok {
		return c.entry(n), false, nil
	}
	if !c.cfg.OpensAt.IsZero() && now.Before(c.cfg.OpensAt) {
		return coupon.Entry{}, false, &coupon.NotOpenError{OpensAt: c.cfg.OpensAt}
	}
	c.seq++
	n := c.seq
	c.users[userKey] = n
	c.userIDs[n] = userID
	if n > c.cfg.Stock {
		c.results[n] = ""
		c.rejected++
	} else {
		c.queue = append(c.queue, n)
		c.queuedAt[n] = now.UnixMilli()
	}
	return c.entry(n), true, nil
}

// Entry implements coupon.Store.
func (cs *Coupons) Entry(_ context.Context, id, userKey string) (coupon.Entry, error) {
	c, err := cs.get(id)
	if err != nil {
		return coupon.Entry{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.users[userKey]
	if !ok {
		return coupon.Entry{}, coupon.ErrEntryNotFound
	}
	return c.entry(n), nil
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
	var got []int64
	for m, exp := range c.taken {
		if exp <= now {
			got = append(got, m)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if len(got) > n {
		got = got[:n]
	}
	k := min(n-len(got), len(c.queue))
	got = append(got, c.queue[:k]...)
	c.queue = c.queue[k:]
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	tasks := make([]coupon.Task, len(got))
	for i, m := range got {
		c.taken[m] = now + lease.Milliseconds()
		tasks[i] = coupon.Task{Number: m, UserID: c.userIDs[m], Waited: -time.Millisecond}
		if at, ok := c.queuedAt[m]; ok {
			tasks[i].Waited = time.Duration(now-at) * time.Millisecond
		}
	}
	return tasks, nil
}

// Record implements coupon.Store.
func (cs *Coupons) Record(ctx context.Context, id string, outcomes []coupon.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := cs.get(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range outcomes {
		delete(c.taken, o.Number)
		delete(c.queuedAt, o.Number)
		if _, done := c.results[o.Number]; done {
			continue
		}
		c.results[o.Number] = o.Code
		if o.Code != "" {
			c.issued++
		} else {
			c.rejected++
		}
	}
	return nil
}

// CampaignStats implements coupon.Store.
func (cs *Coupons) CampaignStats(_ context.Context, id string) (coupon.Stats, error) {
	c, err := cs.get(id)
	if err != nil {
		return coupon.Stats{}, err
	}
	now := queue.FromMS(cs.now().UnixMilli())
	c.mu.Lock()
	defer c.mu.Unlock()
	return coupon.Stats{Stock: c.cfg.Stock, Entries: c.seq, Issued: c.issued, Rejected: c.rejected, Taken: int64(len(c.taken)), Now: now}, nil
}

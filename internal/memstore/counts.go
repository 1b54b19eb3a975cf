package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/store"
)

// Counts are the store.Counters and store.Shares of one process (the rules of the Redis
// store's lua/count.lua and lua/share_*.lua). Counters' windows are swept as the map grows;
// a key's shares go with its last one.
type Counts struct {
	now func() time.Time

	mu      sync.Mutex
	windows map[store.CountKey]countWindow
	sweepAt int
	shares  map[store.CountKey]map[string]share // key -> holder -> share
}

type countWindow struct {
	end, n int64 // the window's end (unix ms) and the count in it
}

type share struct {
	n, until int64 // count, and when the share lapses (unix ms)
}

var (
	_ store.Counters = (*Counts)(nil)
	_ store.Shares   = (*Counts)(nil)
)

// NewCounts returns empty Counts on cfg's clock.
func NewCounts(cfg Config) *Counts {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Counts{now: cfg.Now, windows: map[store.CountKey]countWindow{}, sweepAt: 1024,
		shares: map[store.CountKey]map[string]share{}}
}

// Count implements store.Counters.
func (c *Counts) Count(_ context.Context, key store.CountKey, n int64, window time.Duration) (int64, time.Duration, error) {
	win := window.Milliseconds()
	if win <= 0 || n < 0 {
		return 0, 0, fmt.Errorf("memstore: count: window %s, n %d", window, n)
	}
	now := c.now().UnixMilli()
	end := now - now%win + win
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.windows[key]
	if w.end != end {
		w = countWindow{end: end}
	}
	if n > 0 {
		w.n += n
		c.windows[key] = w
		if len(c.windows) >= c.sweepAt {
			for k, old := range c.windows {
				if old.end <= now {
					delete(c.windows, k)
				}
			}
			c.sweepAt = max(1024, 2*len(c.windows))
		}
	}
	return w.n, time.Duration(end-now) * time.Millisecond, nil
}

// TakeShare implements store.Shares.
func (c *Counts) TakeShare(_ context.Context, p store.TakeParams) (bool, error) {
	now := c.now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := c.shares[p.Key]
	var total int64
	mine, live := share{n: max(p.Held, 0)}, false
	for h, sh := range hs {
		switch {
		case sh.until <= now:
			delete(hs, h) // lapsed
		case h == p.Holder:
			mine, live = sh, true
			total += sh.n
		default:
			total += sh.n
		}
	}
	if p.Once && live {
		hs[p.Holder] = share{n: mine.n, until: now + p.TTL.Milliseconds()}
		return true, nil
	}
	if p.Once {
		mine.n = 0
	}
	if !live {
		total += mine.n
	}
	if total >= p.Limit {
		return false, nil
	}
	if hs == nil {
		hs = map[string]share{}
		c.shares[p.Key] = hs
	}
	hs[p.Holder] = share{n: mine.n + 1, until: now + p.TTL.Milliseconds()}
	return true, nil
}

// GiveShare implements store.Shares.
func (c *Counts) GiveShare(_ context.Context, key store.CountKey, holder string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := c.shares[key]
	sh, ok := hs[holder]
	switch {
	case !ok:
	case sh.n <= 1:
		c.drop(key, hs, holder)
	default:
		sh.n--
		hs[holder] = sh
	}
	return nil
}

// drop removes holder's share of key, and the key with its last share.
func (c *Counts) drop(key store.CountKey, hs map[string]share, holder string) {
	delete(hs, holder)
	if len(hs) == 0 {
		delete(c.shares, key)
	}
}

// RenewShares implements store.Shares.
func (c *Counts) RenewShares(_ context.Context, holder string, shares []store.Share, ttl time.Duration) error {
	now := c.now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range shares {
		hs := c.shares[s.Key]
		if s.N <= 0 {
			c.drop(s.Key, hs, holder)
			continue
		}
		if hs == nil {
			hs = map[string]share{}
			c.shares[s.Key] = hs
		}
		sh, ok := hs[holder]
		if !ok || sh.until <= now {
			sh.n = s.N
		}
		sh.until = now + ttl.Milliseconds()
		hs[holder] = sh
	}
	return nil
}

package gate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"sync"
	"time"
)

// maxOnlineEntries bounds the online-check cache; beyond it, expired entries are swept and,
// if it is still full, answers are not cached.
const maxOnlineEntries = 100_000

// onlineCache asks the waiting room whether admitted sessions are live, one request per token
// at a time, and keeps each answer for OnlineCacheTTL.
type onlineCache struct {
	cfg Config
	url string
	log *slog.Logger

	mu      sync.Mutex
	entries map[[32]byte]*onlineEntry // by SHA-256 of the token
}

type onlineEntry struct {
	done    chan struct{} // closed when err is set
	err     error         // nil: live
	expires time.Time     // Clock time after which the answer is stale
}

func newOnlineCache(cfg Config, url string, log *slog.Logger) *onlineCache {
	return &onlineCache{cfg: cfg, url: url, log: log, entries: make(map[[32]byte]*onlineEntry)}
}

// check returns nil while the waiting room confirms the token's session is live, ErrNotLive
// when it says it is not, and ErrOnlineUnavailable when it gives no answer (nil with
// OnlineFailOpen). tokenExp bounds how long an answer is cached.
func (o *onlineCache) check(ctx context.Context, token string, client netip.Addr, tokenExp time.Time) error {
	var where string
	if client.IsValid() {
		where = client.String()
	}
	key := sha256.Sum256([]byte(token + "\x00" + where)) // one answer per token and address
	now := o.cfg.Clock.Now()

	o.mu.Lock()
	e, ok := o.entries[key]
	if ok {
		select {
		case <-e.done:
			if now.After(e.expires) {
				ok = false // stale: ask again
			}
		default: // a check of this token is under way: share its answer
		}
	}
	if !ok {
		e = &onlineEntry{done: make(chan struct{})}
		if len(o.entries) >= maxOnlineEntries {
			o.sweepLocked(now)
		}
		if len(o.entries) < maxOnlineEntries && o.cfg.OnlineCacheTTL > 0 {
			o.entries[key] = e
		}
		go o.ask(e, token, where, tokenExp)
	}
	o.mu.Unlock()

	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *onlineCache) sweepLocked(now time.Time) {
	for k, e := range o.entries {
		select {
		case <-e.done:
			if now.After(e.expires) {
				delete(o.entries, k)
			}
		default:
		}
	}
}

// ask makes one online check (not bound to any one visitor's request, since several may wait
// for it) and publishes its answer in e.
func (o *onlineCache) ask(e *onlineEntry, token, client string, tokenExp time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), o.cfg.RequestTimeout)
	defer cancel()
	err := func() (err error) {
		defer func() { // a panic (a custom HTTPClient's) must not leave the waiters hanging
			if p := recover(); p != nil {
				err = o.unavailable(fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		return o.request(ctx, token, client)
	}()
	e.expires = o.cfg.Clock.Now().Add(o.cfg.OnlineCacheTTL)
	if tokenExp.Before(e.expires) {
		e.expires = tokenExp
	}
	e.err = err
	close(e.done)
}

func (o *onlineCache) request(ctx context.Context, token, client string) error {
	u := o.url
	if client != "" {
		u += "?client=" + url.QueryEscape(client)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return o.unavailable(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := o.cfg.HTTPClient.Do(req)
	if err != nil {
		return o.unavailable(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusUnauthorized:
		return ErrNotLive
	case http.StatusForbidden:
		return ErrShared
	default:
		return o.unavailable(fmt.Errorf("status %d", resp.StatusCode))
	}
}

// unavailable logs a check without an answer and returns the verdict: ErrOnlineUnavailable,
// or pass (nil) with OnlineFailOpen.
func (o *onlineCache) unavailable(err error) error {
	o.log.Warn("waitroom gate: online admission check failed", "url", o.url, "err", err, "fail_open", o.cfg.OnlineFailOpen)
	if o.cfg.OnlineFailOpen {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrOnlineUnavailable, err)
}

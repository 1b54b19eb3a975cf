package gate

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxJWKSBytes bounds the key set the gate reads; the waiting room's is about 250 bytes.
const maxJWKSBytes = 1 << 20

// Backoff of failed key-set fetches: 1 s, doubling, at most JWKSRefresh.
const (
	backoffMin    = time.Second
	maxRefreshGap = 24 * time.Hour // longest max-age honoured
)

// keySource holds the waiting room's verification keys, fetched from the JWKS URL by one
// background loop (run): at start, then every refresh period (or max-age), with exponential
// backoff after a failure. lookup asks the loop for an early fetch when a kid is unknown, at
// most once per JWKSMinRefresh.
type keySource struct {
	cfg Config
	log *slog.Logger

	keys atomic.Pointer[map[string]ed25519.PublicKey] // nil until the first successful fetch

	kick chan struct{} // buffered(1): asks run for a fetch now

	mu        sync.Mutex
	inFlight  bool          // a fetch is under way
	stopped   bool          // run has returned: no more fetches
	lastKick  time.Time     // when lookup last asked for a fetch (Clock time)
	attempted chan struct{} // closed when the current (or, if none, the next) fetch ends
	loaded    chan struct{} // closed after the first successful fetch
}

func newKeySource(cfg Config, log *slog.Logger) *keySource {
	return &keySource{
		cfg: cfg, log: log,
		kick:      make(chan struct{}, 1),
		attempted: make(chan struct{}),
		loaded:    make(chan struct{}),
		inFlight:  true, // run starts with a fetch: early lookups wait for it
	}
}

// run is the refresh loop; it returns when stop is closed, closing done.
func (s *keySource) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer func() {
		s.mu.Lock()
		s.stopped, s.inFlight = true, false
		close(s.attempted) // release lookups waiting for a fetch that will not come
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	failures := 0
	for {
		wait, err := s.fetchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			wait = min(backoffMin<<min(failures-1, 20), max(s.cfg.JWKSRefresh, backoffMin))
			s.log.Warn("waitroom gate: fetching the key set failed", "url", s.cfg.JWKSURL, "err", err, "failures", failures, "retry_in", wait)
		} else {
			failures = 0
		}
		select {
		case <-stop:
			return
		case <-s.cfg.Clock.After(wait):
		case <-s.kick:
		}
	}
}

// fetchOnce fetches and installs the key set, and returns how long to wait before the next
// fetch when it succeeded.
func (s *keySource) fetchOnce(ctx context.Context) (time.Duration, error) {
	s.mu.Lock()
	s.inFlight = true
	s.mu.Unlock()

	keys, wait, err := s.fetchRecovered(ctx)
	if err == nil {
		s.keys.Store(&keys)
	}

	s.mu.Lock()
	s.inFlight = false
	if !s.stopped {
		close(s.attempted)
		s.attempted = make(chan struct{})
	}
	if err == nil {
		select {
		case <-s.loaded:
		default:
			close(s.loaded)
		}
	}
	s.mu.Unlock()
	return wait, err
}

// fetchRecovered is fetch with a panic (a bug, or a custom HTTPClient's) turned into an error
// carrying the stack, so that the loop goes on and waiting lookups are released.
func (s *keySource) fetchRecovered(ctx context.Context) (keys map[string]ed25519.PublicKey, wait time.Duration, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return s.fetch(ctx)
}

// jwk is one key of a JWK Set (RFC 7517 §4); only OKP Ed25519 keys (RFC 8037 §2) are used.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

func (s *keySource) fetch(ctx context.Context) (map[string]ed25519.PublicKey, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.JWKSURL, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, 0, fmt.Errorf("GET %s: status %d", s.cfg.JWKSURL, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(body) > maxJWKSBytes {
		return nil, 0, fmt.Errorf("key set larger than %d bytes", maxJWKSBytes)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, 0, err
	}
	wait := s.cfg.JWKSRefresh
	if age, ok := maxAgeOf(resp.Header.Get("Cache-Control")); ok {
		wait = min(max(age, s.cfg.JWKSMinRefresh), maxRefreshGap)
	}
	return keys, wait, nil
}

// parseJWKS returns the Ed25519 verification keys of a JWK Set by kid. Keys of other types,
// with another alg or a use other than "sig", and keys without a kid are skipped; a set with
// no usable key is an error (the previous keys stay in use).
func parseJWKS(body []byte) (map[string]ed25519.PublicKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	keys := make(map[string]ed25519.PublicKey, len(set.Keys))
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || k.Kid == "" ||
			(k.Alg != "" && k.Alg != "EdDSA") || (k.Use != "" && k.Use != "sig") {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			continue
		}
		if _, dup := keys[k.Kid]; !dup {
			keys[k.Kid] = ed25519.PublicKey(x)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("key set has no Ed25519 signing key")
	}
	return keys, nil
}

// maxAgeOf returns the max-age directive of a Cache-Control header (RFC 9111 §5.2.2.1).
// no-store and no-cache count as absent (the refresh period applies).
func maxAgeOf(cc string) (time.Duration, bool) {
	var age time.Duration
	found := false
	for _, d := range strings.Split(cc, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		switch strings.ToLower(name) {
		case "no-store", "no-cache":
			return 0, false
		case "max-age":
			n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64)
			if err != nil || n < 0 {
				return 0, false
			}
			age, found = time.Duration(min(n, int64(maxRefreshGap/time.Second)))*time.Second, true
		}
	}
	return age, found
}

// lookup returns the key named kid. An unknown kid asks the loop for a fetch and waits for it,
// unless such a request was made less than JWKSMinRefresh ago (so tokens with made-up kids
// cannot make the gate hammer the waiting room); a fetch already under way (the first one at
// start) is waited for instead.
func (s *keySource) lookup(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	if keys := s.keys.Load(); keys != nil {
		if k, ok := (*keys)[kid]; ok {
			return k, nil
		}
	}
	s.mu.Lock()
	wait := s.attempted
	inFlight := s.inFlight
	now := s.cfg.Clock.Now()
	kick := !inFlight && !s.stopped && (s.lastKick.IsZero() || now.Sub(s.lastKick) >= s.cfg.JWKSMinRefresh)
	if kick {
		s.lastKick = now
	}
	s.mu.Unlock()
	if kick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	if inFlight || kick {
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	keys := s.keys.Load()
	if keys == nil {
		return nil, ErrKeysUnavailable
	}
	if k, ok := (*keys)[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w: unknown kid %q", ErrInvalidToken, kid)
}

func (s *keySource) ready(ctx context.Context) error {
	select {
	case <-s.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

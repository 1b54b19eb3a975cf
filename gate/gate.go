package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/pathrule"
)

// Defaults of [Config].
const (
	// DefaultCookieName, with "_" and the event id after it, is the default cookie's name
	// ("waitroom_admission_spring-sale"): one cookie per event, so that the gates of two
	// events on one site do not overwrite (or, finding the other event's token, delete) each
	// other's.
	DefaultCookieName     = "waitroom_admission"
	DefaultJWKSRefresh    = 5 * time.Minute
	DefaultJWKSMinRefresh = 10 * time.Second
	DefaultOnlineCacheTTL = 2 * time.Second
	DefaultClockSkew      = 30 * time.Second
	DefaultRequestTimeout = 5 * time.Second

	// QueryParam is the query parameter with which the waiting-room page hands the admission
	// token to the event's redirect_url.
	QueryParam = "waitroom_token"
)

// Issuer is the "iss" claim of every admission token.
const Issuer = "waitroom"

// Config configures a [Gate]. WaitingRoomURL and EventID are required; every other field has
// a default.
type Config struct {
	// WaitingRoomURL is the base URL of the waiting room, e.g. "https://queue.example.com"
	// (http or https, no query; a trailing slash is ignored). Required.
	WaitingRoomURL string
	// EventID is the event whose admissions the gate accepts (the "evt" claim); it matches
	// ^[a-z0-9][a-z0-9_-]{0,63}$. Required.
	EventID string
	// JWKSURL is where the waiting room publishes its public keys. Defaults to
	// WaitingRoomURL + "/.well-known/jwks.json".
	JWKSURL string
	// JWKSRefresh is how often the key set is fetched again when its response carries no
	// Cache-Control max-age; with a max-age, that (at least JWKSMinRefresh, at most 24 h) is
	// the period. After a failed fetch the gate retries after 1 s, doubling each time up to
	// JWKSRefresh, and keeps the keys it has. Defaults to 5 min.
	JWKSRefresh time.Duration
	// JWKSMinRefresh is the shortest time between two fetches caused by tokens with an
	// unknown kid, and the floor of a max-age. Defaults to 10 s.
	JWKSMinRefresh time.Duration

	// CookieName is the cookie that carries the admission token after the hand-off. It must be
	// a valid cookie name (RFC 6265 token). Defaults to "waitroom_admission_" + EventID
	// (DefaultCookieName); give each event's gate its own name when you set it.
	CookieName string
	// CookiePath is the cookie's Path. Defaults to "/".
	CookiePath string
	// CookieDomain is the cookie's Domain; empty (the default) makes a host-only cookie.
	CookieDomain string
	// TrustForwardedProto makes "X-Forwarded-Proto: https" count as an HTTPS request (the
	// cookie is then Secure). Set it only behind a proxy that sets that header itself. With
	// TrustedProxies, only their header is believed, as the waiting room believes it (the same
	// code); without, any peer's. Requests with r.TLS set always count as HTTPS.
	TrustForwardedProto bool

	// OnlineCheck makes the gate confirm every admission with the waiting room,
	// GET {WaitingRoomURL}/v1/events/{EventID}/admission with the token as bearer: 200 means
	// the admitted session is live (and the check counts as its activity), 401 that it is
	// not. Other answers and transport errors turn the visitor away (503 with Retry-After,
	// ErrOnlineUnavailable) and are logged, unless OnlineFailOpen is set.
	OnlineCheck bool
	// OnlineCacheTTL is how long the answer of an online check is reused for the same token.
	// Defaults to 2 s; a negative value disables the cache.
	OnlineCacheTTL time.Duration
	// OnlineFailOpen lets visitors through on their offline-verified token when their online
	// check could not be answered (the waiting room is unreachable or answers neither 200, 401
	// nor 403). By default they are turned away: an online check exists to refuse what the
	// token alone cannot show (a session ended, an admission used from more addresses than the
	// event allows), and a check that fails open refuses none of it while the waiting room is
	// away.
	OnlineFailOpen bool
	// ClientAddr is the visitor's address, which the online check names (?client=) so that
	// the waiting room counts the addresses one admission is used from (the event's
	// limits.addresses_per_admission: a token copied to many machines is refused on all but a
	// few, ErrShared). Defaults to the request's RemoteAddr, or with TrustedProxies to the
	// address they name; set it only where the site resolves its visitors another way (a
	// listener on a unix socket, whose RemoteAddr names no address). With OnlineCheck, a
	// visitor whose address it cannot tell (the zero Addr) is turned away (503,
	// ErrClientUnknown, logged): uncounted, the admission could be used from any number of
	// addresses.
	ClientAddr func(r *http.Request) netip.Addr
	// TrustedProxies are the site's own proxies in front of this handler (load balancers,
	// nginx; CIDRs, "10.0.0.0/8", "127.0.0.1/32"): the visitor's address is then read from
	// the header they write (ClientIPHeader) as the waiting room reads it behind its
	// --trusted-proxies (the same code), from the right, past each trusted address, and never
	// from a request whose peer is not one of them. A visitor is one address to both, and
	// one that writes the header itself cannot name another. Empty (the default): the peer's
	// address. Not with ClientAddr.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the header TrustedProxies write: "X-Forwarded-For" (the default) or
	// "Forwarded" (RFC 7239).
	ClientIPHeader string

	// ClockSkew is the tolerance applied to exp, nbf and iat, between the waiting room's clock
	// and this one. Defaults to 30 s; a negative value means none.
	ClockSkew time.Duration
	// RequestTimeout bounds each JWKS fetch and online check. Defaults to 5 s.
	RequestTimeout time.Duration
	// HTTPClient makes the requests to the waiting room. Defaults to a client with
	// http.DefaultTransport.
	HTTPClient *http.Client
	// Logger receives key-fetch failures and failed online checks. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Clock tells time and waits; tests pass a fake one. Defaults to the system clock.
	Clock Clock

	// HealthKey, when set, turns on the health reports of admission mode auto: the gate
	// measures the admitted requests it passes (latency to the status, 5xx) and POSTs them
	// every HealthEvery to {WaitingRoomURL}/v1/events/{EventID}/health with this key as
	// bearer (an admin key of role health_reporter, which may do nothing else, or an
	// operator's; minted with "events": [EventID], it reports for this event and no other:
	// see the waiting room's docs/autoadmit.md and docs/api.md). Within a report each client
	// (ClientAddr's address, an IPv6 /64) and session counts only so much, as in the waiting
	// room's own gate: one visitor's own 5xx or slow requests are not the site's health
	// (docs/autoadmit.md, "Each client counts alike").
	HealthKey string
	// HealthEvery is the period of the health reports, and of each client's bound. Defaults
	// to 1 s (the controller's window).
	HealthEvery time.Duration

	// Paths are the path prefixes [Gate.Site] protects ("/checkout", "/api/cart/"; empty:
	// every path), read with the waiting room's path rule, the one its gate and forward-auth
	// check apply (internal/pathrule; docs/gate.md, "Which paths are protected"): a path any origin
	// could read as under a prefix waits ("/CHECKOUT", "/checkout;x", "/checkout.json",
	// "/%63heckout/", "/index.php/checkout", "/?pagename=checkout"), and one that servers read
	// in different ways is refused (400 invalid_path: "%2F", a backslash, "..;", double encoding).
	// Each must start with "/" and be clean; a prefix without a trailing "/" also covers
	// the paths below it. Only [Gate.Site] reads them: [Gate.Handler] protects all it wraps.
	Paths []string
	// BypassPaths are prefixes [Gate.Site] passes without an admission, even under Paths
	// ("/static/"): only when every reading of the path is under one, compared as bytes.
	BypassPaths []string
	// PathsIgnoreQuery makes [Gate.Site] match the path alone. By default it also reads the
	// query as front controllers route by it (WordPress's "/?pagename=checkout"), so that
	// "/search?q=checkout" waits too; set this for a site whose router reads the path only
	// (the gate file's query_routes: false).
	PathsIgnoreQuery bool
}

// Clock is the time source of a [Gate]: Now judges exp, nbf, iat and cache ages; After waits
// between key-set fetches (like time.After).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// withDefaults returns c with every unset field defaulted.
func (c Config) withDefaults() Config {
	c.WaitingRoomURL = strings.TrimRight(c.WaitingRoomURL, "/")
	if c.JWKSURL == "" && c.WaitingRoomURL != "" {
		c.JWKSURL = c.WaitingRoomURL + "/.well-known/jwks.json"
	}
	c.JWKSRefresh = cmp.Or(c.JWKSRefresh, DefaultJWKSRefresh)
	c.JWKSMinRefresh = cmp.Or(c.JWKSMinRefresh, DefaultJWKSMinRefresh)
	c.CookieName = cmp.Or(c.CookieName, DefaultCookieName+"_"+c.EventID)
	c.CookiePath = cmp.Or(c.CookiePath, "/")
	c.OnlineCacheTTL = cmp.Or(c.OnlineCacheTTL, DefaultOnlineCacheTTL)
	if c.ClockSkew == 0 {
		c.ClockSkew = DefaultClockSkew
	} else if c.ClockSkew < 0 {
		c.ClockSkew = 0
	}
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	if c.HealthEvery == 0 {
		c.HealthEvery = time.Second
	}
	c.HTTPClient = cmp.Or(c.HTTPClient, &http.Client{})
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.ClientAddr == nil {
		// The connection's address (the zero Addr when unreadable); New sets the one
		// TrustedProxies name before.
		c.ClientAddr = clientaddr.Peer
	}
	return c
}

func (c Config) validate() error {
	if err := checkBaseURL("WaitingRoomURL", c.WaitingRoomURL); err != nil {
		return err
	}
	if err := checkBaseURL("JWKSURL", c.JWKSURL); err != nil {
		return err
	}
	if !validEventID(c.EventID) {
		return fmt.Errorf("gate: EventID %q does not match ^[a-z0-9][a-z0-9_-]{0,63}$", c.EventID)
	}
	if err := (&http.Cookie{Name: c.CookieName, Value: "x", Path: c.CookiePath, Domain: c.CookieDomain}).Valid(); err != nil {
		return fmt.Errorf("gate: cookie: %w", err)
	}
	switch {
	case c.JWKSRefresh < 0:
		return errors.New("gate: JWKSRefresh is negative")
	case c.JWKSMinRefresh < 0:
		return errors.New("gate: JWKSMinRefresh is negative")
	case c.RequestTimeout < 0:
		return errors.New("gate: RequestTimeout is negative")
	case c.HealthEvery < 0:
		return errors.New("gate: HealthEvery is negative")
	}
	for _, p := range c.Paths {
		if err := pathrule.CheckProtected(p); err != nil {
			return fmt.Errorf("gate: Paths: %w", err)
		}
	}
	for _, p := range c.BypassPaths {
		if err := pathrule.CheckBypass(p); err != nil {
			return fmt.Errorf("gate: BypassPaths: %w", err)
		}
	}
	return nil
}

func checkBaseURL(field, s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("gate: %s: %w", field, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("gate: %s %q is not an absolute http(s) URL without query", field, s)
	}
	return nil
}

func validEventID(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-') {
			continue
		}
		return false
	}
	return true
}

// Gate verifies admissions and guards handlers. It is safe for concurrent use. Build it with
// [New]; call [Gate.Close] when done, which stops its background key refresh.
type Gate struct {
	cfg      Config
	log      *slog.Logger
	roomURL  string // {base}/e/{event}
	checkURL string // {base}/v1/events/{event}/admission

	keys       *keySource
	online     *onlineCache
	proxies    *clientaddr.Resolver // Config.TrustedProxies, whose X-Forwarded-Proto is believed; nil without
	unknownLog sync.Once            // the first visitor whose address is unknown is logged
	health     *health              // nil without Config.HealthKey
	paths      []pathrule.Prefix    // Config.Paths ("/" when none), for Site
	healthDone chan struct{}

	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}
}

// New validates cfg, starts fetching the waiting room's key set in the background and returns
// the gate. It returns an error (nothing is started) when a required field is missing or a
// field is invalid. New does not wait for the keys: requests that arrive before the first
// fetch completes wait for it (bounded by [Config.RequestTimeout]); [Gate.Ready] waits
// explicitly.
func New(cfg Config) (*Gate, error) {
	// Who the visitor is, decided once: by the site's code or by its proxies, not both.
	if cfg.ClientAddr != nil && len(cfg.TrustedProxies) > 0 {
		return nil, errors.New("gate: ClientAddr and TrustedProxies both name the visitor: set one")
	}
	if _, err := clientaddr.ParseHeader(cfg.ClientIPHeader); err != nil {
		return nil, fmt.Errorf("gate: ClientIPHeader: %w", err)
	}
	// One resolver of TrustedProxies: who the visitor is behind them (ClientAddr) and whether
	// their request came over HTTPS (isHTTPS).
	var proxies *clientaddr.Resolver
	if len(cfg.TrustedProxies) > 0 {
		h, _ := clientaddr.ParseHeader(cfg.ClientIPHeader)
		proxies = clientaddr.New(cfg.TrustedProxies, h)
		cfg.ClientAddr = proxies.Addr // not set: refused above
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Gate{
		cfg:      cfg,
		proxies:  proxies,
		log:      cfg.Logger.With("component", "waitroom-gate", "event", cfg.EventID),
		roomURL:  cfg.WaitingRoomURL + "/e/" + cfg.EventID,
		checkURL: cfg.WaitingRoomURL + "/v1/events/" + cfg.EventID + "/admission",
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	g.paths = sitePrefixes(cfg.Paths)
	g.keys = newKeySource(cfg, g.log)
	if cfg.OnlineCheck {
		g.online = newOnlineCache(cfg, g.checkURL, g.log)
	}
	go g.keys.run(g.stop, g.done)
	if cfg.HealthKey != "" {
		g.health, g.healthDone = newHealth(cfg), make(chan struct{})
		go g.health.run(cfg.HealthEvery, cfg.Clock, g.stop, g.healthDone)
	}
	return g, nil
}

// Close stops the background key refresh and waits for it to end. Keys already fetched stay
// in use. It may be called more than once.
func (g *Gate) Close() {
	g.closeOnce.Do(func() { close(g.stop) })
	<-g.done
	if g.healthDone != nil {
		<-g.healthDone
	}
}

// Ready waits until a key set has been fetched, and returns nil then; otherwise it returns
// ctx's error when ctx ends.
func (g *Gate) Ready(ctx context.Context) error {
	return g.keys.ready(ctx)
}

// WaitingRoomURL returns the page where the gate sends visitors without an admission:
// {WaitingRoomURL}/e/{EventID}.
func (g *Gate) WaitingRoomURL() string { return g.roomURL }

// CookieName is the name of the cookie that carries the admission token (Config.CookieName, or
// its default): clear it when the visitor's session ends at the site.
func (g *Gate) CookieName() string { return g.cfg.CookieName }

// Admission is a verified admission: what the token asserts.
type Admission struct {
	Event    string    // "evt": the event id (always the gate's event)
	TicketID string    // "sub": the ticket id
	Number   int64     // "num": the ticket number, >= 1
	Expires  time.Time // "exp", whole seconds: the token's end (the session may be extended by activity; a fresh token then carries the new end)
	IssuedAt time.Time // "iat", whole seconds
	Token    string    // the admission token itself, e.g. to call the waiting room's hold and booking API for this visitor
}

type ctxKey struct{}

// FromContext returns the admission that [Gate.Handler] verified for this request; ok is false
// for a context that did not come through a gate.
func FromContext(ctx context.Context) (a Admission, ok bool) {
	a, ok = ctx.Value(ctxKey{}).(Admission)
	return a, ok
}

// NewContext returns ctx carrying a; handlers see it through [FromContext]. Tests of handlers
// behind a gate use it to fake an admission.
func NewContext(ctx context.Context, a Admission) context.Context {
	return context.WithValue(ctx, ctxKey{}, a)
}

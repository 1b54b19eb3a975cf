// Package app is the composition root of a waitroom instance: it builds every component from
// plain Configs, mounts the HTTP surfaces (line, sale, push, pages, the gate's check) on one
// API, owns every HTTP server (the API, the gate's listener, --metrics-addr), and owns the
// order in which things start and stop. The command line builds one from flags; tests build
// several on one Redis to act as a fleet. No package below it knows it exists.
//
// Everything that runs has one shape, Start(ctx) error and Stop(ctx) error (see service), and
// New declares the list of them once, literally, at its end. Run drains before it stops: when
// its ctx ends (SIGTERM), /readyz fails at once while every listener, loop and push connection
// goes on for Config.Drain (the components live until Stop, not until ctx ends); then Stop
// runs. Every request but the push streams carries a deadline of Config.StoreTimeout; Redis
// connections and replies, and PostgreSQL connections and statements, are bounded by it too,
// and every loop step by loop.DefaultStepTimeout.
//
// What starts, in order (Start), and stops, in reverse (Stop):
//
//	database             opened in New; closed last
//	backend              the line, sale, coupon and notifier store; opened in New
//	embedded line        restored from the database in New; saved to it at Stop
//	event registry       loads the events, then syncs them every second
//	metrics lease        whether this instance reports the shared store's gauges (metrics)
//	sale                 rebuilds the stores' sold state from SQL, then syncs every second
//	                     (and repairs a sold count that drifted from SQL's)
//	coupon issuance      campaigns sync and this instance's issuance worker
//	history              the console's history: this instance's heartbeat and counts every
//	                     5 s, and the samples of every event and campaign on the one
//	                     instance holding the history lease (package recorder)
//	admission processor  steps every event's line every 100 ms
//	auto admission       flushes this instance's measurements of the origins (every 250 ms)
//	                     and steps the controllers of the auto events whose lease it holds
//	                     (every second; package autoadmit)
//	metrics server       GET /metrics on Config.MetricsListener (--metrics-addr); stopped
//	                     after the others, so that the shutdown can be watched
//	gate server          the reverse proxy of Config.Gate on Config.GateListener
//	http server          serves the API on Config.Listener
//	push hub             live connections; stopped before the servers so that its WebSocket
//	                     and SSE clients are told to reconnect elsewhere and the servers'
//	                     shutdown does not wait for them
//
// At Stop the push hub and the servers, in turn, stop accepting and let requests in flight
// finish, all within one Config.ShutdownGrace. Their connections are bounded together, per client and in total, below
// the open-file limit, idle ones shed first (package connlimit; Config.Conns), and the push
// hub's cap fits inside that total (pushCap). The line's rules are one service (package line) that the API, the
// gate, its forward-auth check and push all call, and who a request comes from is one
// resolver (package clientaddr) that every listener uses.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/admission"
	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/buildinfo"
	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/issuance"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/origin"
	"github.com/waitroom/waitroom/internal/push"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/recorder"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/saleapi"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
	"github.com/waitroom/waitroom/internal/web"
)

// Config configures an instance. Without RedisURL (or Redis) the line lives in memory (the
// embedded deployment) and is saved to the database at Stop.
type Config struct {
	DatabaseURL string // a PostgreSQL URL, or a SQLite file path; required
	RedisURL    string // "" = in-process line
	RedisPrefix string // defaults to "wr:"
	// DatabaseMaxConns bounds the connections to PostgreSQL (sqlstore.Options.MaxConns; 0 =
	// sqlstore.DefaultPostgresConns).
	DatabaseMaxConns int
	// Redis is an existing client to use instead of dialling RedisURL (tests share one).
	Redis rueidis.Client
	// AdminKey and TokenKey: "" = generated once and kept in the database (embedded only).
	AdminKey string
	// TokenKey is the secret the token keys derive from; "new,old" also verifies old tokens.
	TokenKey string
	// TokenTTL is the longest life of an admission token (its exp is the session's end, or
	// this long after issue if sooner); status reads and push messages carry fresh ones.
	// Defaults to DefaultTokenTTL.
	TokenTTL time.Duration
	// IdentityKey (HS256 bytes) and IdentityPublicKey (Ed25519, PEM or base64): either enables
	// identity JWTs on joins.
	IdentityKey, IdentityPublicKey string
	// IdentityIssuer and IdentityAudience, when set, are required in identity JWTs' "iss" and
	// "aud" claims.
	IdentityIssuer, IdentityAudience string
	// Listener, when set, is where Start serves the HTTP API (Stop shuts the server down in
	// order). Nil: the caller serves Handler() itself (tests).
	Listener net.Listener
	// StoreTimeout bounds every wait on Redis and PostgreSQL: a connection attempt, a reply,
	// a statement (PostgreSQL's statement_timeout) and each HTTP request but the push streams
	// (one deadline per request, set in httpapi), so that a store that accepts and never
	// answers makes a request answer 503 store_unavailable within it. Defaults to 2 s.
	StoreTimeout time.Duration
	// Drain is how long the instance keeps serving after Run's ctx ends, with /readyz failing,
	// so that load balancers take it out of rotation before it stops accepting. Defaults to
	// 5 s; negative = no drain.
	Drain time.Duration
	// ShutdownGrace bounds the shutdown of everything that serves after the drain (the push
	// hub, then each listener, one deadline for all): requests in flight get this long to
	// finish. Defaults to 25 s.
	ShutdownGrace time.Duration
	// TrustedProxies are the proxies whose forwarding header names the client (package
	// clientaddr: the one rule of every listener, the API, the gate and its forward-auth check,
	// push); none by default. A gate file's trusted_proxies are added to them.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the forwarding header the trusted proxies write: X-Forwarded-For (the
	// zero value) or Forwarded; the other is never believed.
	ClientIPHeader clientaddr.Header
	// AllowedOrigins lists the web sites whose pages may make browsers join and open push
	// connections (package origin's list; "" = the same origin only).
	AllowedOrigins string
	// CaptchaSiteverifyURLs are the only verification URLs an event's external challenge may
	// name, and the only ones the server POSTs its secrets to (captcha.Config.Allowed). Nil:
	// captcha.DefaultSiteverifyURLs (Turnstile, hCaptcha, reCAPTCHA); empty: none.
	CaptchaSiteverifyURLs []string
	// HealthURLs are the URLs an event's auto.health_url may be, polled by the controller
	// (serve --health-urls). The zero value allows none.
	HealthURLs autoadmit.HealthURLs
	// MetricsPublic serves /metrics on the API without the admin key (the command line serves it
	// on its own listener instead, --metrics-addr).
	MetricsPublic bool
	// HistoryInterval is the time between two samples of the operator console's history, and
	// between two heartbeats of the instance (package recorder). Defaults to
	// recorder.DefaultInterval.
	HistoryInterval time.Duration
	// Push tunes the push hub; its Store, Events, Tickets, Admissions, Notifier, StoreError
	// and Logger are set by the app. Its MaxConns defaults to pushCap of Conns.MaxConns.
	Push push.Config
	// Conns bounds the connections of every listener together (package connlimit: per
	// client, in total with a reserve for health checks and admin calls, idle ones shed
	// first); its Trusted (the trusted proxies), OnRefuse and OnShed are set by the app.
	Conns connlimit.Config
	// IdleTimeout closes a keep-alive connection idle this long while the instance is not busy
	// (http.Server.IdleTimeout; when busy, Conns.BusyIdleTimeout). 0: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// OnAdmitStep, if set, is called after every admission step of this instance that
	// admitted or ended sessions, after the push hub (tests).
	OnAdmitStep func(event string, r queue.AdmitResult)
	Logger      *slog.Logger
	// AccessLog, when set, gets one line per HTTP request (see httpapi.Config.AccessLog) of the
	// fraction AccessLogSample (0 to 1), and one per 5xx.
	AccessLog       *slog.Logger
	AccessLogSample float64
	// OnAdminKeyGenerated is called once with a newly generated admin key.
	OnAdminKeyGenerated func(key string)
	// Gate, when set, puts the waiting room in front of the sites of a gate file: the
	// forward-auth check GET /v1/gate/check on the API and, with GateListener, the reverse
	// proxy (package gateway).
	Gate         *gateway.File
	GateListener net.Listener
	// MetricsListener, when set, serves GET /metrics without the admin key (--metrics-addr).
	MetricsListener net.Listener
	// Pprof serves Go's profiles (net/http/pprof, /debug/pprof/) on MetricsListener too.
	Pprof bool
	// StoreClock stubs the line store's clock, which orders nothing but times its windows and
	// expiries (tests: a fixed window whose edge a test must not straddle). Nil: Redis's TIME,
	// or the process's clock in the embedded store.
	StoreClock func() time.Time
	// AutoInterval is the step of admission mode auto's controllers. Defaults to 1 s.
	AutoInterval time.Duration
	// WaitForStores makes New wait for a Redis or PostgreSQL that cannot be reached yet,
	// retrying every 0.5-5 s until ctx ends, instead of failing (storewait.go); meanwhile the
	// API's listener answers GET and HEAD /healthz 200 and /readyz 503 store_unavailable, and
	// every other request (every one on the gate's and the metrics listener) has its
	// connection closed unanswered.
	WaitForStores bool
}

// MaxHeaderBytes bounds a request's header block (bytes): an admission token is about 500
// bytes; 32 KiB leaves room for a shop domain's cookies, far below net/http's 1 MiB default.
const MaxHeaderBytes = 32 << 10

// App is one instance. Its fields are the components New built, for the command line and
// tests; they are not to be replaced.
type App struct {
	DB         *sqlstore.DB
	Backend    store.Backend
	Registry   *registry.Registry
	Keys       *adminkey.Keys
	Admitter   *admission.Admitter
	API        *httpapi.API
	Line       *line.Service        // the one way into the lines, every door's
	Clients    *clientaddr.Resolver // who a request comes from, every listener's
	Metrics    *metrics.Metrics
	Admissions *token.Admissions
	Tickets    *token.TicketIDs
	Challenges *challenge.Issuer
	Sales      *booking.Service
	Coupons    *issuance.Service
	Recorder   *recorder.Recorder
	Hub        *push.Hub
	Conns      *connlimit.Limiter // the connections of every listener
	Gate       *gateway.Gateway   // nil without Config.Gate
	// Signals are this instance's measurements of the origins (admission mode auto), and
	// Auto the controllers of the auto events (package autoadmit).
	Signals  *autoadmit.Signals
	Auto     *autoadmit.Controller
	AdminKey string
	Log      *slog.Logger

	lines                                *memstore.Store   // the embedded line, saved at Stop; nil on Redis
	coupons                              *memstore.Coupons // the embedded campaigns, saved with the line
	forwarding                           *forwardingNotice
	origins                              *originNotice
	originPolicy                         *origin.Policy
	tokenKeys                            *keyNotice
	apiServer, gateServer, metricsServer *httpServer
	// handler is the API listener's: the API, and with a gate the page's places (PagePlaces).
	handler http.Handler

	components []component // in start order: the list New declares
	started    int         // how many of components started
	stopOnce   sync.Once
	stopErr    error
	served     chan error // a server that ended by itself

	drain     time.Duration
	grace     time.Duration // Config.ShutdownGrace: the one bound of everything that serves, at Stop
	draining  chan struct{} // closed when Run's ctx ends: /readyz fails from then on
	drainOnce sync.Once
}

// The defaults of Config's bounds. A pod gets SIGTERM when it is taken out of the Service's
// endpoints; kube-proxies and ingress controllers take a few seconds to notice, so the instance
// keeps serving for the drain (5 s, with /readyz failing) and requests sent meanwhile are
// answered. Then requests in flight get the grace (25 s). A request's store calls are bounded
// by StoreTimeout (2 s) anyway, so the grace is only used up by a slow database. The stop's
// whole budget, drain + grace + a margin for the loops and the line's save (and the chart's
// preStop sleep before SIGTERM), is what the deployment files give a process before they kill
// it; deploy/'s tests read these defaults from `serve --help` and check each file's sum.
const (
	DefaultStoreTimeout  = 2 * time.Second
	DefaultDrain         = 5 * time.Second
	DefaultShutdownGrace = 25 * time.Second
	// DefaultTokenTTL: an admission token of a line that was lost, or of a visitor who left,
	// stops verifying offline within a minute (plus the verifier's clock skew).
	DefaultTokenTTL = 60 * time.Second
)

// New builds the instance: it opens the database and the backend and assembles every
// component, starting nothing. With Config.WaitForStores it waits for stores that do not answer
// yet (storewait.go). Errors: the database's, the backend's, or an invalid key; on error
// whatever was opened is closed.
func New(ctx context.Context, cfg Config) (*App, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.WaitForStores {
		return newWaiting(ctx, cfg)
	}
	return build(ctx, cfg)
}

// build is New without the wait.
func build(ctx context.Context, cfg Config) (_ *App, err error) {
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	cfg.Drain = cmp.Or(cfg.Drain, DefaultDrain)
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	a := &App{Log: cfg.Logger, drain: max(0, cfg.Drain), grace: cfg.ShutdownGrace, draining: make(chan struct{}), served: make(chan error, 3)}
	defer func() {
		if err != nil {
			_ = a.closeOpened(context.Background())
		}
	}()
	if err = a.openDatabase(ctx, &cfg); err != nil {
		return nil, err
	}
	if err = a.openBackend(ctx, cfg); err != nil {
		return nil, err
	}
	if err = a.newKeys(cfg); err != nil {
		return nil, err
	}
	identity, err := identityVerifier(cfg)
	if err != nil {
		return nil, err
	}
	if err = a.newLine(cfg, identity); err != nil {
		return nil, err
	}
	if err = a.newAuto(cfg); err != nil {
		return nil, err
	}
	if err = a.newSale(identity); err != nil {
		return nil, err
	}
	if err = a.newGate(cfg); err != nil {
		return nil, err
	}
	if err = a.newConns(cfg); err != nil {
		return nil, err
	}
	if err = a.newPush(cfg); err != nil {
		return nil, err
	}
	web.Mount(a.API, a.Registry)
	a.handler = noticing(a.Clients, a.API)
	if a.Gate != nil {
		// Behind a forward-auth proxy the page's calls reach this listener: its place must be
		// the gate's, as on the gate's own listener.
		a.handler = noticing(a.Clients, a.Gate.PagePlaces(a.API))
	}
	idle := cfg.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	a.apiServer = newServer("http server", "api", cfg.Listener, a.handler, a.Conns, a.Metrics, idle, cfg.ShutdownGrace, a.served, a.Log, a.adminCheck)
	a.gateServer = newServer("gate server", "gate", cfg.GateListener, noticing(a.Clients, a.Gate), a.Conns, a.Metrics, idle, cfg.ShutdownGrace, a.served, a.Log, nil)
	a.metricsServer = newServer("metrics server", "metrics", cfg.MetricsListener, metricsMux(a.API.MetricsHandler(), cfg.Pprof), a.Conns,
		a.Metrics, idle, cfg.ShutdownGrace, a.served, a.Log, a.adminCheck)

	// What starts, in this order, and stops in reverse (the package comment says why).
	a.components = []component{
		{name: "database", svc: closer(a.closeDatabase), opened: true},
		{name: "backend", svc: closer(a.closeBackend), opened: true},
		{name: "embedded line", svc: closer(a.saveLine), opened: true},
		{name: "event registry", svc: a.Registry},
		{name: "metrics lease", svc: a.Metrics},
		{name: "sale", svc: a.Sales},
		{name: "coupon issuance", svc: a.Coupons},
		{name: "history", svc: a.Recorder},
		{name: "admission processor", svc: a.Admitter},
		{name: "auto admission", svc: a.Auto},
		{name: "metrics server", svc: a.metricsServer, serves: true},
		{name: "gate server", svc: a.gateServer, serves: true},
		{name: "http server", svc: a.apiServer, serves: true},
		{name: "push hub", svc: a.Hub, serves: true},
	}
	return a, nil
}

// Order lists the components in the order Start starts them (Stop stops them in reverse).
func (a *App) Order() []string {
	names := make([]string, len(a.components))
	for i, c := range a.components {
		names[i] = c.name
	}
	return names
}

// closeOpened closes what New opened when New fails before the list is declared: the embedded
// line is saved back (its snapshot was consumed), then the backend and the database close.
func (a *App) closeOpened(ctx context.Context) error {
	return errors.Join(a.saveLine(ctx), a.closeBackend(ctx), a.closeDatabase(ctx))
}

func (a *App) closeDatabase(context.Context) error {
	if a.DB == nil {
		return nil
	}
	return a.DB.Close()
}

func (a *App) closeBackend(context.Context) error {
	if a.Backend.Close == nil {
		return nil
	}
	return a.Backend.Close()
}

// openDatabase opens the database and reads (or generates) the keys kept in it.
func (a *App) openDatabase(ctx context.Context, cfg *Config) (err error) {
	if a.DB, err = sqlstore.OpenWith(ctx, cfg.DatabaseURL, sqlstore.Options{
		ConnectTimeout: cfg.StoreTimeout, StatementTimeout: cfg.StoreTimeout, MaxConns: cfg.DatabaseMaxConns,
	}); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if a.AdminKey, err = storedKey(ctx, a.DB, "admin_key", cfg.AdminKey, cfg.OnAdminKeyGenerated); err != nil {
		return err
	}
	cfg.TokenKey, err = storedKey(ctx, a.DB, "token_key", cfg.TokenKey, nil)
	return err
}

// openBackend opens the Redis backend, or the in-process one with the line saved at the last
// graceful stop.
func (a *App) openBackend(ctx context.Context, cfg Config) error {
	var err error
	// Counted once the metrics exist (New makes them after the backend, before any loop runs).
	resumed := func(event string) {
		if a.Metrics != nil {
			a.Metrics.LineResumes.WithLabelValues(event).Inc()
		}
	}
	switch {
	case cfg.Redis != nil:
		a.Backend, err = redisstore.NewBackend(redisstore.Config{Client: cfg.Redis, Prefix: cfg.RedisPrefix, Logger: a.Log, Numbers: a.DB,
			Now: cfg.StoreClock, OnResume: resumed})
	case cfg.RedisURL != "":
		a.Backend, err = redisstore.Open(ctx, redisstore.OpenConfig{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix,
			Timeout: cfg.StoreTimeout, Logger: a.Log, Numbers: a.DB, OnResume: resumed})
	default:
		var lines *memstore.Store
		a.Backend, lines = memstore.NewBackend(memstore.Config{Numbers: a.DB, Now: cfg.StoreClock})
		coupons, _ := a.Backend.Coupons.(*memstore.Coupons)
		if err := a.restoreLine(ctx, lines, coupons); err != nil {
			return err
		}
		a.lines, a.coupons = lines, coupons // saved from now on: the snapshots were consumed
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// restoreLine loads the line (and the coupon campaigns, coupons nil: none) saved at the last
// graceful stop. A snapshot is used once: after a crash an old one would give out numbers
// twice; without one, each line resumes from its durable numbers when it is first used
// (memstore's durable.go), and each campaign from the database.
func (a *App) restoreLine(ctx context.Context, lines *memstore.Store, coupons *memstore.Coupons) error {
	if coupons != nil {
		if _, err := a.useSnapshot(ctx, "coupons", coupons.Restore); err != nil {
			return fmt.Errorf("restore the saved campaigns: %w", err)
		}
	}
	found, err := a.useSnapshot(ctx, "line", lines.Restore)
	switch {
	case err != nil:
		return fmt.Errorf("restore the saved line: %w", err)
	case found:
		a.Log.Info("restored the line saved at the last shutdown")
	default:
		if evs, lerr := a.DB.ListEvents(ctx); lerr == nil && len(evs) > 0 {
			a.Log.Warn("no saved line: the last stop was not graceful, so every event's line resumes from its durable numbers (docs/durability.md)")
		}
	}
	return nil
}

// useSnapshot restores the snapshot saved under name, if any, and deletes it (used once).
func (a *App) useSnapshot(ctx context.Context, name string, restore func([]byte) error) (found bool, err error) {
	snap, err := a.DB.LoadSnapshot(ctx, name)
	if errors.Is(err, sqlstore.ErrNotFound) {
		return false, nil
	}
	if err == nil {
		err = restore(snap)
	}
	if err == nil {
		err = a.DB.DeleteSnapshot(ctx, name)
	}
	return err == nil, err
}

// saveLine saves the embedded line, and its coupon campaigns, for the next start (nothing on
// Redis).
func (a *App) saveLine(ctx context.Context) error {
	if a.lines == nil {
		return nil
	}
	n, err := a.saveSnapshot(ctx, "line", a.lines.Snapshot)
	if err != nil {
		return fmt.Errorf("save the line: %w", err)
	}
	a.Log.Info("saved the line", "bytes", n)
	if a.coupons != nil {
		if _, err := a.saveSnapshot(ctx, "coupons", a.coupons.Snapshot); err != nil {
			return fmt.Errorf("save the campaigns: %w", err)
		}
	}
	return nil
}

// saveSnapshot saves what snapshot makes under name and returns its size (bytes).
func (a *App) saveSnapshot(ctx context.Context, name string, snapshot func() ([]byte, error)) (int, error) {
	snap, err := snapshot()
	if err == nil {
		err = a.DB.SaveSnapshot(ctx, name, snap)
	}
	return len(snap), err
}

// newKeys derives the token keys and the challenge keys ("new,old": ticket ids, tokens and
// challenges made with old still verify; new ones are made with new).
func (a *App) newKeys(cfg Config) error {
	var (
		keys       []token.Keys
		challenges [][]byte
	)
	for _, s := range strings.Split(cfg.TokenKey, ",") {
		k, err := token.DeriveKeys(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("token key: %w", err)
		}
		keys = append(keys, k)
		ck, err := challenge.DeriveKey(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("token key: %w", err)
		}
		challenges = append(challenges, ck)
	}
	var err error
	if a.Challenges, err = challenge.NewIssuer(challenge.Config{Key: challenges[0], PreviousKeys: challenges[1:]}); err != nil {
		return err
	}
	ttl := cfg.TokenTTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	a.Admissions = token.NewAdmissions(keys[0], keys[1:]...).WithTTL(ttl)
	previous := make([][]byte, 0, len(keys)-1)
	for _, k := range keys[1:] {
		previous = append(previous, k.TicketMAC)
	}
	a.Tickets = token.NewTicketIDs(keys[0].TicketMAC, previous...)
	return nil
}

// identityVerifier returns the verifier of identity JWTs, nil when none is configured.
func identityVerifier(cfg Config) (*token.IdentityVerifier, error) {
	if cfg.IdentityKey == "" && cfg.IdentityPublicKey == "" {
		return nil, nil
	}
	var pub, hk []byte
	if cfg.IdentityPublicKey != "" {
		var err error
		if pub, err = token.ParseEd25519PublicKey(cfg.IdentityPublicKey); err != nil {
			return nil, fmt.Errorf("identity public key: %w", err)
		}
	}
	if cfg.IdentityKey != "" {
		hk = []byte(cfg.IdentityKey)
	}
	v, err := token.NewIdentityVerifier(hk, pub)
	if err != nil {
		return nil, err
	}
	return v.CheckClaims(cfg.IdentityIssuer, cfg.IdentityAudience), nil
}

// newLine assembles the events, the admission processor, the metrics and the API of the line.
func (a *App) newLine(cfg Config, identity *token.IdentityVerifier) error {
	// The metrics first: the stores the services get are timed (their gauges read the
	// registry and the campaigns, built below, only at scrape time).
	a.Metrics = metrics.New(metrics.Config{
		Events:    func() []event.Event { return a.Registry.List() },
		Campaigns: func() []string { return a.Coupons.IDs() },
		Line:      a.Backend.Line, Sale: a.Backend.Sale, Leases: a.Backend.Leases, Logger: a.Log,
		CouponStats: a.couponStats, DB: a.DB.SQL(), LinesDB: a.DB.LinesSQL(), Connections: a.connections,
	})
	a.forwarding = &forwardingNotice{log: a.Log, counter: a.Metrics.UntrustedForwarded, peers: map[netip.Addr]string{}}
	a.Backend.Line = a.Metrics.InstrumentLine(a.Backend.Line)
	a.Backend.Sale = a.Metrics.InstrumentSale(a.Backend.Sale)
	var err error
	if a.Registry, err = registry.New(registry.Config{DB: a.DB, Store: a.Backend.Line, Logger: a.Log,
		DeleteSale: a.Backend.Sale.DeleteInventory}); err != nil {
		return err
	}
	if a.Keys, err = adminkey.New(adminkey.Config{DB: a.DB, RootKey: a.AdminKey}); err != nil {
		return err
	}
	a.Signals = new(autoadmit.Signals) // before the API, which counts the origins' reports in it
	if a.Recorder, err = a.newRecorder(cfg); err != nil {
		return err
	}
	if a.Admitter, err = admission.New(admission.Config{
		Store: a.Backend.Line, Events: a.eventIDs, Logger: a.Log, OnMissing: a.Registry.Restore,
		OnStep: func(id string, r queue.AdmitResult) { a.admitStep(cfg, id, r) },
	}); err != nil {
		return err
	}
	origins, err := origin.Parse(cfg.AllowedOrigins)
	if err != nil {
		return fmt.Errorf("allowed origins: %w", err)
	}
	a.origins = newOriginNotice(a.Log, time.Now)
	origins.OnRefused(a.origins.refused)
	a.originPolicy = origins // the gate's too: one rule of who may join
	trusted := cfg.TrustedProxies
	if cfg.Gate != nil {
		trusted = append(slices.Clone(trusted), cfg.Gate.Trusted()...)
	}
	a.Clients = clientaddr.New(trusted, cfg.ClientIPHeader)
	a.Clients.OnUntrustedForwarding(a.forwarding.seen)
	captchas := captcha.New(captcha.Config{Allowed: cfg.CaptchaSiteverifyURLs}) // the API's writes and the line's checks
	if a.Line, err = line.New(line.Config{
		Store: a.Backend.Line, Events: a.Registry, Tickets: a.Tickets, Identity: identity, Challenges: a.Challenges,
		Captcha: captchas, Counters: a.Backend.Counters, Shares: a.Backend.Shares, Metrics: a.Metrics, History: a.Recorder, Logger: a.Log,
		OnEnd: a.endedHere,
	}); err != nil {
		return err
	}
	a.API, err = httpapi.New(httpapi.Config{
		Registry: a.Registry, Line: a.Line, Admissions: a.Admissions,
		Keys: a.Keys, AuditTrail: a.DB, Metrics: a.Metrics, History: a.Recorder, Logger: a.Log, AccessLog: cfg.AccessLog, AccessLogSample: cfg.AccessLogSample, Ready: a.ready, RequestTimeout: cfg.StoreTimeout,
		Clients: a.Clients, Origins: origins, Captcha: captchas, HealthURLs: cfg.HealthURLs, MetricsPublic: cfg.MetricsPublic, Counters: a.Backend.Counters,
		Signals: a.Signals, AutoStore: a.Backend.Auto, AutoHistory: a.Backend.History,
	})
	return err
}

// couponStats is a campaign's figures (issuance.Service.Stats) for the metrics and the history,
// which are built before the coupon service.
func (a *App) couponStats(ctx context.Context, id string) (coupon.Stats, error) {
	return a.Coupons.Stats(ctx, id)
}

// newRecorder assembles the history of the operator console: this instance's heartbeat and
// counts, and the samples when it holds the history lease.
func (a *App) newRecorder(cfg Config) (*recorder.Recorder, error) {
	info := recorder.Info{Version: buildinfo.Get().Version, StartedAt: time.Now().UTC(), Keys: a.Admissions.KIDs()}
	a.tokenKeys = &keyNotice{log: a.Log, mine: info.Keys}
	if info.Name, _ = os.Hostname(); info.Name == "" {
		info.Name = "unknown"
	}
	if cfg.Listener != nil {
		info.Addr = cfg.Listener.Addr().String()
	}
	return recorder.New(recorder.Config{
		Store: a.Backend.History, Leases: a.Backend.Leases, Line: a.Backend.Line, Sale: a.Backend.Sale,
		CouponStats: a.couponStats, Campaigns: func() []string { return a.Coupons.IDs() }, Events: a.Registry.List,
		Interval: cfg.HistoryInterval, Info: info, Logger: a.Log, Warnings: a.warnings, Archive: a.DB,
		Known: func(id string) bool { _, ok := a.Registry.Cached(id); return ok },
		ObserveWait: func(event string, wait time.Duration) {
			a.Metrics.TimeInQueue.WithLabelValues(event).Observe(wait.Seconds())
		},
	})
}

// newSale assembles the sale (holds, bookings, recovery) and the coupon campaigns, and mounts
// their HTTP routes.
func (a *App) newSale(identity *token.IdentityVerifier) error {
	var err error
	if a.Sales, err = booking.New(booking.Config{
		DB: a.DB, Store: a.Backend.Sale, Events: a.Registry.List, Event: a.Registry.Get, EnsureLine: a.Registry.Restore,
		Logger: a.Log, OnRepair: func(event string, _, _ int64) { a.Metrics.SaleRepairs.WithLabelValues(event).Inc() },
		OnBooked: a.endedHere,
	}); err != nil {
		return err
	}
	if a.Coupons, err = issuance.New(issuance.Config{DB: a.DB, Store: a.Backend.Coupons, Notifier: a.Backend.Notifier,
		Logger: a.Log, Issuer: issuance.IssuerConfig{OnLag: func(campaign string, lag time.Duration) {
			a.Metrics.IssuanceLag.WithLabelValues(campaign).Observe(lag.Seconds())
		}}}); err != nil {
		return err
	}
	return saleapi.Mount(saleapi.Config{API: a.API, Sales: a.Sales, Coupons: a.Coupons, Event: a.Registry.Get,
		Identity: identity, History: a.Recorder, Logger: a.Log})
}

// newConns assembles the limits of the listeners' connections (package connlimit): the
// trusted proxies are those of the one client rule (package clientaddr), and what is refused
// or shed is counted in the metrics.
func (a *App) newConns(cfg Config) error {
	cc := cfg.Conns
	cc.Trusted = a.Clients.Trusted
	cc.OnRefuse = func(listener string, r connlimit.Reason) {
		a.Metrics.ConnsRefused.WithLabelValues(listener, string(r)).Inc()
	}
	cc.OnShed = func(listener string, r connlimit.Reason) {
		a.Metrics.ConnsShed.WithLabelValues(listener, string(r)).Inc()
	}
	// Every listener's series from the start, at 0: a rate of them (an alert, a dashboard's
	// panel) reads 0 before the first refusal, not "no data".
	listeners := []string{"api"}
	if cfg.GateListener != nil {
		listeners = append(listeners, "gate")
	}
	if cfg.MetricsListener != nil {
		listeners = append(listeners, "metrics")
	}
	for _, l := range listeners {
		for _, r := range []connlimit.Reason{connlimit.ReasonClient, connlimit.ReasonTotal, "reserve"} {
			a.Metrics.ConnsRefused.WithLabelValues(l, string(r))
		}
		for _, r := range []connlimit.Reason{connlimit.ReasonClient, connlimit.ReasonTotal, connlimit.ReasonBusy,
			connlimit.ReasonPush, connlimit.ReasonFiles, connlimit.ReasonSilent} {
			a.Metrics.ConnsShed.WithLabelValues(l, string(r))
		}
	}
	// A request that does not parse gets a problem, as every other client mistake does, not
	// net/http's plain text; no handler saw it, so it is counted here.
	cc.ServerAnswer = func(listener string, p []byte) ([]byte, bool) {
		q, code, ok := httpjson.FramingAnswer(p)
		if ok {
			a.Metrics.MalformedRequests.WithLabelValues(listener, code).Inc()
		}
		return q, ok
	}
	var err error
	if a.Conns, err = connlimit.New(cc); err != nil {
		return err
	}
	// A process left at a distribution's default of 1,024 open files holds 512 connections:
	// enough to try the service, not for a crowd. Said once at the start, where an operator
	// looks, rather than found in a sale's 503s.
	switch limit := connlimit.OpenFileLimit(); {
	case limit == 0:
	case cfg.Conns.MaxConns == 0 && limit < lowFileLimit:
		a.Log.Warn("the open-file limit caps this instance's connections; raise it (ulimit -n, systemd LimitNOFILE) for a crowd",
			"open_file_limit", limit, "max_conns", a.Conns.Config().MaxConns)
	case cfg.Conns.MaxConns > connlimit.DefaultMaxConnsFor(limit):
		a.Log.Warn("--max-conns is more than the open-file limit leaves for connections: past it, accepting fails for want of files; raise the limit (ulimit -n, systemd LimitNOFILE) or lower --max-conns",
			"open_file_limit", limit, "max_conns", cfg.Conns.MaxConns, "max_conns_for_limit", connlimit.DefaultMaxConnsFor(limit))
	}
	return nil
}

// lowFileLimit is the open-file limit under which an instance warns at start: under it, it
// holds fewer than ~3,600 connections (connlimit.DefaultMaxConnsFor), of which fewer than
// ~3,200 WebSockets of waiting users.
const lowFileLimit = 4096

// connections returns the counts of the listeners' connections (the metrics read them at
// scrape time).
func (a *App) connections() metrics.ConnCounts {
	if a.Conns == nil {
		return metrics.ConnCounts{}
	}
	c := metrics.ConnCounts{Open: map[string]int{}, Idle: a.Conns.Idle(), Max: a.Conns.Config().MaxConns}
	for name, s := range map[string]*httpServer{"api": a.apiServer, "gate": a.gateServer, "metrics": a.metricsServer} {
		if s != nil && s.ln != nil {
			c.Open[name] = s.open()
		}
	}
	return c
}

// pushCap is the default cap of push connections of an instance that holds at most maxConns
// connections (connlimit's total, which counts the push connections too, and keeps the
// open files under the process's limit), reserve of them kept for health checks and admin
// calls: what is left when a ninth of maxConns, and at least an eighteenth beyond the reserve,
// stays for joins, polls, health checks and admin calls while push is full; at most push's
// own DefaultMaxConns. With 20,000 files: 16,000 of 18,000 (reserve 64), 2,000 left; with
// --max-conns 150: 123 (reserve 18), 9 left for joins and polls beyond the reserve.
func pushCap(maxConns, reserve int) int {
	left := max(maxConns/9, reserve+(maxConns+17)/18, reserve+1)
	return max(1, min(push.DefaultMaxConns, maxConns-left))
}

// newPush assembles the push hub and mounts its streams.
func (a *App) newPush(cfg Config) error {
	pc := cfg.Push
	if pc.MaxConns == 0 {
		pc.MaxConns = pushCap(a.Conns.Config().MaxConns, a.Conns.Config().Reserve)
	} else if limit := a.Conns.Config().MaxConns - a.Conns.Config().Reserve; pc.MaxConns >= limit {
		a.Log.Warn("the push cap leaves no connection for joins and polls: push connections count in the connection cap too",
			"push_max_conns", pc.MaxConns, "max_conns", a.Conns.Config().MaxConns)
	}
	pc.Store, pc.Events, pc.Tickets, pc.Admissions = a.Line, a.Registry, a.Tickets, a.Admissions
	pc.Notifier, pc.StoreError, pc.Logger = a.Backend.Notifier, a.API.StoreError, a.Log
	pc.Shares = cmp.Or(pc.Shares, a.Backend.Shares)
	pc.OpenTimeout = cmp.Or(pc.OpenTimeout, cfg.StoreTimeout)
	if pc.ClientKey == nil {
		pc.ClientKey = a.API.ClientKey
	}
	if pc.OriginAllowed == nil {
		pc.OriginAllowed = a.API.OriginAllowed
	}
	var err error
	if a.Hub, err = push.New(pc); err != nil {
		return err
	}
	if err := a.Metrics.Registry.Register(a.Hub.Collector()); err != nil {
		return err
	}
	a.API.HandleStream(push.RouteWebSocket, http.HandlerFunc(a.Hub.ServeWebSocket))
	a.API.HandleStream(push.RouteSSE, http.HandlerFunc(a.Hub.ServeSSE))
	return nil
}

// admitStep is the admission processor's hook: metrics, push delivery, the test hook.
func (a *App) admitStep(cfg Config, id string, r queue.AdmitResult) {
	a.Metrics.Admissions.WithLabelValues(id, "processor").Add(float64(r.Admitted))
	a.Metrics.SessionsEnded.WithLabelValues(id).Add(float64(r.Expired))
	a.Recorder.Admitted(id, r)
	a.Hub.OnStep(id, r)
	if cfg.OnAdmitStep != nil {
		cfg.OnAdmitStep(id, r)
	}
}

// endedHere is the line's and the sale's hook of a ticket that left or completed its session
// (a booking, or the origin's complete) through this instance: its live streams are told,
// here and on the other instances (a.Hub is made after both, before anything is served).
func (a *App) endedHere(ref queue.TicketRef) {
	if a.Hub != nil {
		a.Hub.Ended(ref)
	}
	if a.Gate != nil {
		a.Gate.Ended(ref)
	}
}

// eventIDs lists the ids of the known events.
func (a *App) eventIDs() []string {
	evs := a.Registry.List()
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

// Handler is the instance's HTTP handler (the API listener's).
func (a *App) Handler() http.Handler { return a.handler }

// ready answers /readyz: not ready from the drain on (at once, even while a ping to a slow
// database is in flight), else whether the database and the backend answer within ctx, less
// those skip leaves out.
func (a *App) ready(ctx context.Context, skip httpapi.ReadyChecks) error {
	pinged := make(chan error, 1)
	go func() { pinged <- a.ping(ctx, skip) }() // ends with ctx at the latest
	var err error
	select {
	case <-a.draining:
	case err = <-pinged:
	}
	// The drain wins whenever it has begun: a ping that returned at once (every check
	// excluded) is ready with it, and select would pick either.
	select {
	case <-a.draining:
		return httpapi.ErrShuttingDown
	default:
		return err
	}
}

func (a *App) ping(ctx context.Context, skip httpapi.ReadyChecks) error {
	if !skip.Database {
		if err := a.DB.Ping(ctx); err != nil {
			return fmt.Errorf("database: %w", err)
		}
	}
	if a.Backend.Ping != nil && !skip.Redis {
		if err := a.Backend.Ping(ctx); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	return nil
}

// Start starts the components in order. On error, those started are stopped again.
func (a *App) Start(ctx context.Context) error {
	for _, c := range a.components {
		if err := c.svc.Start(ctx); err != nil {
			_ = a.Stop(context.Background())
			return fmt.Errorf("start %s: %w", c.name, err)
		}
		a.started++
	}
	return nil
}

// Run starts the instance, serves until ctx ends (or a server fails), then drains and stops it:
// /readyz fails at once, every listener (the API, the gate, --metrics-addr) serves for
// Config.Drain more, then Stop stops accepting and gives requests in flight
// Config.ShutdownGrace to finish.
func (a *App) Run(ctx context.Context) error {
	// The components live until Stop, not until ctx ends: they serve during the drain. ctx
	// still cancels a start that has not finished.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	starting := context.AfterFunc(ctx, endLife)
	if err := a.Start(life); err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop while starting: Start stopped what it had started
		}
		return err
	}
	if !starting() { // ctx ended while starting: stop without a drain
		return a.Stop(context.Background())
	}
	var served error
	select {
	case <-ctx.Done():
	case served = <-a.served: // a server that ended by itself
	}
	if served == nil {
		a.Drain()
		a.Log.Info("draining: /readyz fails, requests are still served", "drain", a.drain)
		select {
		case <-time.After(a.drain):
		case served = <-a.served:
		}
	}
	a.Log.Info("shutting down")
	return errors.Join(served, a.Stop(context.Background()))
}

// Drain makes /readyz fail from now on (the instance goes on serving). Run calls it when its
// ctx ends. Safe to call more than once.
func (a *App) Drain() { a.drainOnce.Do(func() { close(a.draining) }) }

// Stop stops what Start started, and closes what New opened, in reverse order; ctx bounds the
// HTTP servers' shutdown and the embedded line's save. What serves requests (the push hub, then
// each listener in turn) shares one Config.ShutdownGrace, from Stop's start: a deadline for all
// of them, not a grace each, so that drain + grace + a few seconds for the loops and the save
// is the whole stop (the budget the deployment files give; docs/deploy.md). It is safe to call
// more than once (later calls return the first's result) and after a failed New or Start.
func (a *App) Stop(ctx context.Context) error {
	a.stopOnce.Do(func() {
		serving, cancel := context.WithTimeout(ctx, a.grace)
		defer cancel()
		var errs []error
		for i := len(a.components) - 1; i >= 0; i-- {
			c := a.components[i]
			if !c.opened && i >= a.started {
				continue // never started
			}
			sctx := ctx
			if c.serves {
				sctx = serving
			}
			if err := c.svc.Stop(sctx); err != nil {
				a.Log.Warn("stop "+c.name, "err", err)
				errs = append(errs, fmt.Errorf("stop %s: %w", c.name, err))
			}
		}
		a.stopErr = errors.Join(errs...)
	})
	return a.stopErr
}

// storedKey returns the key given, else the one stored under name, else a new one that it
// stores (calling shown with it, so it is printed once).
func storedKey(ctx context.Context, db *sqlstore.DB, name, given string, shown func(string)) (string, error) {
	if given != "" {
		return given, nil
	}
	fresh, err := token.GenerateSecret()
	if err != nil {
		return "", err
	}
	k, err := db.SettingOrInit(ctx, name, fresh)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if k == fresh && shown != nil {
		shown(k)
	}
	return k, nil
}

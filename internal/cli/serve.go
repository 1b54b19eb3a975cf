package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/origin"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

const serveUsage = `Usage: waitroom serve [flags]

With no flags and no environment, one process keeps the line in memory and durable records in
the SQLite file ./waitroom.db; admin and token keys are generated on first start and kept there
(the admin key is printed once). With --redis and --database (PostgreSQL), any number of
instances share one line.

Environment (flags win over it; keys given here win over stored ones):
  WAITROOM_ADDR, WAITROOM_DATA, WAITROOM_GATE, WAITROOM_REDIS_URL, WAITROOM_DATABASE_URL,
  WAITROOM_REDIS_PREFIX, WAITROOM_LOG_FORMAT, WAITROOM_LOG_LEVEL, WAITROOM_ACCESS_LOG
                                (as the flags of the same name)
  WAITROOM_ADMIN_KEY            bearer key of admin calls (required with Redis)
  WAITROOM_TOKEN_KEY            secret the admission-token and ticket-id keys derive from
                                (required with Redis; "new,old" keeps verifying old tokens)
  WAITROOM_IDENTITY_KEY         HS256 key of identity JWTs signed by the integrating site
  WAITROOM_IDENTITY_PUBLIC_KEY  Ed25519 public key (PEM or base64) of EdDSA identity JWTs
  WAITROOM_TRUSTED_PROXIES, WAITROOM_ALLOWED_ORIGINS, WAITROOM_METRICS_ADDR,
  WAITROOM_IDENTITY_ISSUER, WAITROOM_IDENTITY_AUDIENCE   (the flags of the same names)
  WAITROOM_STORE_TIMEOUT, WAITROOM_DRAIN, WAITROOM_SHUTDOWN_GRACE, WAITROOM_TOKEN_TTL
                                as the flags (Go durations)

The admin key and the HS256 identity key must be at least 16 bytes.

On SIGTERM or Ctrl-C, /readyz fails at once, requests are served for --drain more, then the
listener closes and requests in flight get --shutdown-grace to finish. The defaults (5 s + 25 s)
fit Kubernetes' terminationGracePeriodSeconds of 30: endpoints are updated during the drain.

Flags:
`

// serveConfig is everything serve reads from flags and the environment.
type serveConfig struct {
	addr, data, redisURL, databaseURL, prefix, logFormat, gate    string
	logLevel                                                      slog.Level
	accessLog                                                     bool
	adminKey, tokenKey, identityKey, identityPublic               string
	metricsAddr, allowedOrigins, identityIssuer, identityAudience string
	trustedProxies                                                []netip.Prefix
	storeTimeout, drain, shutdownGrace, tokenTTL                  time.Duration
}

// MinKeyLen is the least length of the admin key and the HS256 identity key (bytes): 128 bits,
// beyond guessing even unthrottled.
const MinKeyLen = 16

func parseServe(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	fs.StringVar(&c.addr, "addr", envOr("WAITROOM_ADDR", ":8080"), "listen address")
	fs.StringVar(&c.data, "data", envOr("WAITROOM_DATA", "waitroom.db"), "SQLite file of the embedded deployment")
	fs.StringVar(&c.redisURL, "redis", envOr("WAITROOM_REDIS_URL", ""), "Redis URL: redis://host:port, a comma-separated node list, or redis+cluster://host:port,...")
	fs.StringVar(&c.databaseURL, "database", envOr("WAITROOM_DATABASE_URL", ""), "PostgreSQL URL (postgres://...)")
	fs.StringVar(&c.prefix, "redis-prefix", envOr("WAITROOM_REDIS_PREFIX", "wr:"), "prefix of every Redis key")
	fs.StringVar(&c.gate, "gate", envOr("WAITROOM_GATE", ""), "gate file (YAML or JSON): protect an existing site, see docs/gate.md")
	fs.StringVar(&c.logFormat, "log-format", envOr("WAITROOM_LOG_FORMAT", "text"), "log format: text or json")
	proxies := fs.String("trusted-proxies", envOr("WAITROOM_TRUSTED_PROXIES", ""), "comma-separated CIDRs of proxies whose Forwarded / X-Forwarded-For name the client (default none: the connection's address)")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", envOr("WAITROOM_ALLOWED_ORIGINS", ""), "comma-separated origins (https://shop.example) whose pages may join and open push connections; * = any (default: the same origin only)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", envOr("WAITROOM_METRICS_ADDR", ""), "serve /metrics without a key on this address of its own (default: /metrics on --addr needs the admin key)")
	fs.StringVar(&c.identityIssuer, "identity-issuer", envOr("WAITROOM_IDENTITY_ISSUER", ""), "require this iss in identity JWTs")
	fs.StringVar(&c.identityAudience, "identity-audience", envOr("WAITROOM_IDENTITY_AUDIENCE", ""), "require this aud in identity JWTs")
	level := fs.String("log-level", envOr("WAITROOM_LOG_LEVEL", "info"), "least level logged: debug, info, warn or error")
	fs.BoolVar(&c.accessLog, "access-log", envOr("WAITROOM_ACCESS_LOG", "true") == "true",
		"log one line per HTTP request (request id, route, status, duration) at level info")
	var durs [4]string
	fs.StringVar(&durs[0], "store-timeout", envOr("WAITROOM_STORE_TIMEOUT", app.DefaultStoreTimeout.String()),
		"longest wait on Redis or PostgreSQL (connect, reply, statement, request) before answering 503 store_unavailable")
	fs.StringVar(&durs[1], "drain", envOr("WAITROOM_DRAIN", app.DefaultDrain.String()),
		"after SIGTERM, how long requests are still served while /readyz fails (0 = none)")
	fs.StringVar(&durs[2], "shutdown-grace", envOr("WAITROOM_SHUTDOWN_GRACE", app.DefaultShutdownGrace.String()),
		"after the drain, how long requests in flight get to finish")
	fs.StringVar(&durs[3], "token-ttl", envOr("WAITROOM_TOKEN_TTL", app.DefaultTokenTTL.String()),
		"longest life of an admission token (status reads and push messages carry fresh ones)")
	if err := fs.Parse(args); err != nil {
		return c, flagError(err)
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, usagef("--log-level must be debug, info, warn or error")
	}
	for i, d := range []*time.Duration{&c.storeTimeout, &c.drain, &c.shutdownGrace, &c.tokenTTL} {
		v, err := time.ParseDuration(durs[i])
		if err != nil || v < 0 || (v == 0 && i != 1) {
			return c, usagef("--%s must be a positive duration such as 2s (got %q)",
				[]string{"store-timeout", "drain", "shutdown-grace", "token-ttl"}[i], durs[i])
		}
		*d = v
	}
	if c.drain == 0 {
		c.drain = -1 // app.Config: negative = no drain
	}
	var err error
	if c.trustedProxies, err = clientaddr.ParseCIDRs(*proxies); err != nil {
		return c, usagef("--trusted-proxies: %v", err)
	}
	if _, err := origin.Parse(c.allowedOrigins); err != nil {
		return c, usagef("--allowed-origins: %v", err)
	}
	if fs.NArg() > 0 {
		return c, usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	c.adminKey = envOr("WAITROOM_ADMIN_KEY", "")
	c.tokenKey = envOr("WAITROOM_TOKEN_KEY", "")
	c.identityKey = envOr("WAITROOM_IDENTITY_KEY", "")
	c.identityPublic = envOr("WAITROOM_IDENTITY_PUBLIC_KEY", "")
	if c.adminKey != "" && len(c.adminKey) < MinKeyLen {
		return c, usagef("WAITROOM_ADMIN_KEY must be at least %d bytes (it is %d); e.g. openssl rand -base64 32", MinKeyLen, len(c.adminKey))
	}
	if c.identityKey != "" && len(c.identityKey) < MinKeyLen {
		return c, usagef("WAITROOM_IDENTITY_KEY must be at least %d bytes (it is %d); RFC 7518 asks 32 for HS256", MinKeyLen, len(c.identityKey))
	}
	if c.redisURL != "" {
		var missing []string
		if !strings.HasPrefix(c.databaseURL, "postgres://") && !strings.HasPrefix(c.databaseURL, "postgresql://") {
			missing = append(missing, "a PostgreSQL URL (--database or WAITROOM_DATABASE_URL)")
		}
		if c.adminKey == "" {
			missing = append(missing, "WAITROOM_ADMIN_KEY")
		}
		if c.tokenKey == "" {
			missing = append(missing, "WAITROOM_TOKEN_KEY")
		}
		if len(missing) > 0 {
			return c, usagef("with Redis, instances share one line and must share their keys: set %s", strings.Join(missing, ", "))
		}
	} else if c.databaseURL != "" {
		return c, usagef("--database is for the scale-out deployment and needs --redis too; without both, serve uses the embedded line and the SQLite file --data")
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, usagef("--log-format must be text or json")
	}
	return c, nil
}

// serve runs the service until ctx ends, then shuts down in the order internal/app keeps.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	opts := &slog.HandlerOptions{Level: c.logLevel}
	var handler slog.Handler = slog.NewTextHandler(stderr, opts)
	if c.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, opts)
	}
	log := slog.New(handler)
	var accessLog *slog.Logger
	if c.accessLog {
		accessLog = log.With("log", "access")
	}

	// Listen first: a second start on a busy address fails before it touches anything.
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	defer ln.Close() // after Shutdown, a no-op
	var gate *gateway.File
	var gateLn net.Listener
	if c.gate != "" {
		f, err := gateway.ReadFile(c.gate)
		if err != nil {
			return usagef("--gate: %v", err)
		}
		gate = &f
		if f.Listen != "" {
			if gateLn, err = net.Listen("tcp", f.Listen); err != nil {
				return fmt.Errorf("gate: %w", err)
			}
			defer gateLn.Close()
		}
	}
	embedded := c.redisURL == ""
	dbURL := c.databaseURL
	if embedded {
		dbURL = c.data
		// The embedded line lives in this process and is saved to the data file on shutdown:
		// two processes on one file would each admit up to max_active and overwrite each
		// other's saved line. The lock is the kernel's (flock), so a crash releases it.
		if file, ok := sqlstore.SQLiteFile(c.data); ok {
			unlock, err := lockDataFile(file)
			if err != nil {
				return err
			}
			defer unlock()
		}
	}
	a, err := app.New(ctx, app.Config{
		DatabaseURL: dbURL, RedisURL: c.redisURL, RedisPrefix: c.prefix,
		AdminKey: c.adminKey, TokenKey: c.tokenKey,
		IdentityKey: c.identityKey, IdentityPublicKey: c.identityPublic, Logger: log, AccessLog: accessLog, Listener: ln,
		StoreTimeout: c.storeTimeout, Drain: c.drain, ShutdownGrace: c.shutdownGrace, TokenTTL: c.tokenTTL,
		IdentityIssuer: c.identityIssuer, IdentityAudience: c.identityAudience,
		TrustedProxies: c.trustedProxies, AllowedOrigins: c.allowedOrigins,
		Gate: gate, GateListener: gateLn,
		OnAdminKeyGenerated: func(k string) {
			fmt.Fprintf(stdout, "Admin key (generated on first start, shown once; kept in %s):\n  %s\n", c.data, k)
		},
	})
	if err != nil {
		return err
	}
	mode := "embedded (line in memory, records in " + c.data + ")"
	if !embedded {
		mode = "scale-out (Redis + PostgreSQL)"
	}
	if c.metricsAddr != "" {
		mln, err := net.Listen("tcp", c.metricsAddr)
		if err != nil {
			_ = a.Stop(context.Background())
			return err
		}
		msrv := &http.Server{Handler: metricsMux(a.API.MetricsHandler()), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		log.Info("metrics serving", "addr", mln.Addr().String())
	}
	log.Info("waitroom serving", "addr", ln.Addr().String(), "mode", mode)
	if gateLn != nil {
		log.Info("gate serving", "addr", gateLn.Addr().String(), "file", c.gate)
	} else if gate != nil {
		log.Info("gate: forward-auth only (no listen in the gate file)", "check", "/v1/gate/check", "file", c.gate)
	}
	// Run stops in the order app's package comment gives: live push clients are told to
	// reconnect, HTTP requests in flight finish, the loops stop, the embedded line is saved.
	return a.Run(ctx)
}

// metricsMux serves h at GET /metrics (the --metrics-addr listener).
func metricsMux(h http.Handler) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", h)
	return m
}

// lockDataFile takes an exclusive lock on file+".lock" for the life of this process, or fails
// at once when another process holds it. It returns the function that releases it.
func lockDataFile(file string) (func(), error) {
	if dir := filepath.Dir(file); dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create the directory of %s: %w", file, err)
		}
	}
	l := flock.New(file + ".lock")
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", l.Path(), err)
	}
	if !ok {
		return nil, fmt.Errorf("%s is in use by another waitroom serve (it holds %s): the embedded line lives in one process; stop that one first, give this one its own --data, or run the scale-out deployment (Redis + PostgreSQL) for several instances",
			file, l.Path())
	}
	return func() { _ = l.Unlock() }, nil
}

package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/gofrs/flock"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/cmdflag"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

const serveUsage = `Usage: waitroom serve [flags]

With no flags and no environment, one process keeps the line in memory and durable records in
the SQLite file ./waitroom.db; admin and token keys are generated on first start and kept there
(the admin key is printed once; keys given in the environment win over stored ones). With
--redis and --database (PostgreSQL), any number of instances share one line.

On SIGTERM or Ctrl-C, /readyz fails at once, requests are served for --drain more, then the
listeners close and requests in flight get --shutdown-grace (one for all) to finish; then the
loops stop and an embedded line is saved. Give the process --drain + --shutdown-grace + a
margin (35 s with the defaults) before it is killed; behind a preStop sleep, add the sleep.

`

// MinKeyLen is the least length of the admin key and the HS256 identity key (bytes): 128 bits,
// beyond guessing even unthrottled.
const MinKeyLen = 16

// serveFlags returns serve's flag set, whose flags and --help both come from serveSettings.
func serveFlags() (*cmdflag.FlagSet, *settingsFlags) {
	fs := cmdflag.New("serve", serveUsage)
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); writeSettingsHelp(fs.Output(), serveSettings) }
	fs.Unknown = func(name string) string {
		env := "WAITROOM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		for _, s := range serveSettings {
			if s.flag == "" && s.env == env {
				return "a secret: set " + env + " in the environment; secrets are never flags, which ps shows"
			}
		}
		return ""
	}
	return fs, defineSettings(fs.FlagSet, serveSettings)
}

// parseServe reads serve's settings from args, getenv and the config file (see serveSettings)
// and checks how they go together. --help writes the usage to stdout and returns flag.ErrHelp;
// every mistake is a usage error (exit 2).
func parseServe(args []string, stdout, stderr io.Writer, getenv func(string) string) (serveConfig, error) {
	var c serveConfig
	fs, sf := serveFlags()
	if err := fs.Parse(args, stdout); err != nil {
		return c, err
	}
	if err := sf.load(&c, getenv); err != nil {
		return c, err
	}
	if c.drain == 0 {
		c.drain = -1 // app.Config: negative = no drain
	}
	if c.metricsAddr != "" && sameListen(c.addr, c.metricsAddr) {
		return c, usagef("--metrics-addr %s takes --addr's port (%s): give it a port of its own", c.metricsAddr, c.addr)
	}
	if c.busyIdleTimeout > c.idleTimeout {
		return c, usagef("--busy-idle-timeout %s is longer than --idle-timeout %s: a busy instance would keep idle connections longer than a quiet one; raise --idle-timeout with it", c.busyIdleTimeout, c.idleTimeout)
	}
	if c.pprof && c.metricsAddr == "" {
		return c, usagef("--pprof serves the profiles on --metrics-addr only (an address of its own, not the public one): set --metrics-addr too")
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
	return c, nil
}

// serve runs the service until ctx ends, then shuts down in the order internal/app keeps.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, stdout, stderr, os.Getenv)
	if err != nil {
		return err
	}
	opts := &slog.HandlerOptions{Level: c.logLevel}
	var handler slog.Handler = slog.NewTextHandler(stderr, opts)
	if c.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, opts)
	}
	log := slog.New(handler)
	if names := unknownEnv(os.Environ()); len(names) > 0 {
		log.Warn("environment variables that serve does not read are set: a misspelt setting has no effect (serve --help lists them all)",
			"names", strings.Join(names, ","))
	}
	var accessLog *slog.Logger
	if c.accessLog {
		accessLog = log.With("log", "access")
	}

	// Listen first: a second start on a busy address fails before it touches anything.
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", c.addr, err)
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
			if err := checkListenAddr(f.Listen); err != nil {
				return usagef("--gate: %s: listen: %v", c.gate, err)
			}
			for _, o := range []struct{ name, addr string }{{"--addr", c.addr}, {"--metrics-addr", c.metricsAddr}} {
				if o.addr != "" && sameListen(f.Listen, o.addr) {
					return usagef("--gate: %s: listen %s takes %s's port (%s): the gate needs a port of its own", c.gate, f.Listen, o.name, o.addr)
				}
			}
			if gateLn, err = net.Listen("tcp", f.Listen); err != nil {
				return fmt.Errorf("gate: listen %s: %w", f.Listen, err)
			}
			defer gateLn.Close()
		}
	}
	var metricsLn net.Listener
	if c.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", c.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", c.metricsAddr, err)
		}
		defer metricsLn.Close() // after Shutdown, a no-op
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
		DatabaseURL: dbURL, DatabaseMaxConns: c.databaseMaxConns, RedisURL: c.redisURL, RedisPrefix: c.prefix,
		AdminKey: c.adminKey, TokenKey: c.tokenKey,
		IdentityKey: c.identityKey, IdentityPublicKey: c.identityPublic, Logger: log, AccessLog: accessLog,
		AccessLogSample: c.accessLogSample, Listener: ln,
		StoreTimeout: c.storeTimeout, Drain: c.drain, ShutdownGrace: c.shutdownGrace, TokenTTL: c.tokenTTL,
		IdentityIssuer: c.identityIssuer, IdentityAudience: c.identityAudience,
		TrustedProxies: c.trustedProxies, ClientIPHeader: c.clientIPHeader, AllowedOrigins: c.allowedOrigins,
		Gate: gate, GateListener: gateLn, MetricsListener: metricsLn, Pprof: c.pprof, HistoryInterval: c.historyInterval,
		Conns:                 connlimit.Config{MaxConns: c.maxConns, MaxConnsPerClient: c.maxConnsPerClient, BusyIdleTimeout: c.busyIdleTimeout},
		IdleTimeout:           c.idleTimeout,
		CaptchaSiteverifyURLs: c.captchaSiteverifyURLs,
		HealthURLs:            c.healthURLs,
		// Scale-out: a Redis or PostgreSQL that does not answer yet is waited for, not a
		// reason to exit (the supervisor's restart back-off would outlast the stores' return).
		WaitForStores: !embedded,
		OnAdminKeyGenerated: func(k string) {
			fmt.Fprintf(stdout, "Admin key (generated on first start, shown once; kept in %s):\n  %s\n", c.data, k)
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped while waiting for the stores")
			return nil // asked to stop (SIGTERM) before it served: a clean exit
		}
		return err
	}
	mode := "embedded (line in memory, records in " + c.data + ")"
	if !embedded {
		mode = "scale-out (Redis + PostgreSQL)"
	}
	if metricsLn != nil {
		log.Info("metrics serving", "addr", metricsLn.Addr().String())
	}
	log.Info("waitroom serving", "addr", ln.Addr().String(), "mode", mode)
	if gateLn != nil {
		log.Info("gate serving", "addr", gateLn.Addr().String(), "file", c.gate)
	} else if gate != nil {
		log.Info("gate: forward-auth only (no listen in the gate file)", "check", "/v1/gate/check", "file", c.gate)
	}
	// Run drains every listener and stops in the order app's package comment gives: live push
	// clients are told to reconnect, HTTP requests in flight finish, the loops stop, the
	// embedded line is saved.
	return a.Run(ctx)
}

// lockDataFile takes an exclusive lock (flock) on the data file itself for the life of this
// process, creating it empty when it does not exist yet (an empty file is an empty SQLite
// database), or fails at once when another process holds it. The lock is the file's, not its
// name's: another path to it (a symlink, a hard link, ../) finds it taken. SQLite's own locks
// are POSIX record locks, which flock does not touch. It returns the function that releases it.
func lockDataFile(file string) (func(), error) {
	if dir := filepath.Dir(file); dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create the directory of %s: %w", file, err)
		}
	}
	l := flock.New(file, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", file, err)
	}
	if !ok {
		return nil, fmt.Errorf("%s is in use by another waitroom serve (it holds the file's lock): the embedded line lives in one process; stop that one first, give this one its own --data, or run the scale-out deployment (Redis + PostgreSQL) for several instances",
			file)
	}
	return func() { _ = l.Unlock() }, nil
}

// Package chaos is `waitroom chaos`, the fault-injection suite: a black-box harness that starts
// its own Redis (redis-server on a private port), its own PostgreSQL database on the local
// server, a TCP fault proxy in front of each (internal/faultproxy) and several
// `waitroom serve` processes reaching both through the proxies. For each scenario it creates a
// fresh seat-sale event and coupon campaign, runs line users (join, poll or hold a WebSocket,
// hold and book seats) and coupon entrants that each keep their own history of every request
// and answer, puts a fault on, takes it off, measures the time to recover, and checks the
// invariants from SQL reads and from the clients' histories — never from the server's word
// alone. It talks to the service only over HTTP, to PostgreSQL only with SQL reads, and to
// its own Redis with admin commands.
package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

// Config is one chaos run.
type Config struct {
	// Binary is the waitroom executable to start as `serve`. Required.
	Binary string
	// Only names the scenarios to run (all when empty).
	Only []string
	// LineUsers and Entrants are the clients of each scenario.
	LineUsers, Entrants int
	// MaxActive and AdmitRate are the events' max_active and admit_rate (per second).
	MaxActive int
	AdmitRate float64
	// AdmittedFor is how long an admitted line user stays before holding seats (so that a
	// line forms behind max_active).
	AdmittedFor time.Duration
	// Warmup is how long the clients run before the fault; FaultFor how long a fault stays on
	// (CLIENT PAUSE is always 3 s); HangFor how long PostgreSQL's answers are held.
	Warmup, FaultFor, HangFor time.Duration
	// RecoveryBound is how long after the fault a fully successful probe round must come.
	RecoveryBound time.Duration
	// Drain is how long the clients get to finish after recovery, on top of the time the line
	// needs to drain at max_active (LineUsers × (AdmittedFor + 1 s) / MaxActive); then the
	// clients still running are stopped (line users still waiting show in Activity).
	Drain time.Duration
	// ClientTimeout bounds every client request; one without an answer by then counts as
	// unanswered (outside an instance frozen by the scenario).
	ClientTimeout time.Duration
	// PostgresURL and RedisServer: see EnvConfig.
	PostgresURL, RedisServer string
	// HistoryDir, when set, receives each scenario's client histories as <scenario>.json.
	HistoryDir string
	// Log receives progress (nil = discard).
	Log io.Writer
}

// ShortConfig is --short: every scenario with small crowds, the whole run within 5 minutes on a
// 2-core machine.
func ShortConfig() Config {
	return Config{LineUsers: 30, Entrants: 30, MaxActive: 3, AdmitRate: 5, AdmittedFor: time.Second,
		Warmup: 2 * time.Second, FaultFor: 3 * time.Second, HangFor: 10 * time.Second,
		RecoveryBound: 15 * time.Second, Drain: 10 * time.Second, ClientTimeout: 8 * time.Second}
}

// FullConfig is the default: bigger crowds and longer faults.
func FullConfig() Config {
	return Config{LineUsers: 300, Entrants: 300, MaxActive: 10, AdmitRate: 20, AdmittedFor: 2 * time.Second,
		Warmup: 5 * time.Second, FaultFor: 10 * time.Second, HangFor: 20 * time.Second,
		RecoveryBound: 30 * time.Second, Drain: 30 * time.Second, ClientTimeout: 8 * time.Second}
}

// Run starts the environment, runs the scenarios in turn and returns one row each. Everything
// it started is stopped before it returns, whatever happens (ctx cancelled included).
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	cfg.Log = cmp.Or(cfg.Log, io.Discard)
	var run []scenario
	for _, name := range cfg.Only {
		if !slices.Contains(ScenarioNames(), name) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(ScenarioNames(), ", "))
		}
	}
	for _, s := range scenarios {
		if len(cfg.Only) == 0 || slices.Contains(cfg.Only, s.name) {
			run = append(run, s)
		}
	}
	e, err := StartEnv(ctx, EnvConfig{Binary: cfg.Binary, RedisServer: cfg.RedisServer, PostgresURL: cfg.PostgresURL, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	return runOn(ctx, e, cfg, run)
}

// runOn runs scenarios on a started environment, one row each.
func runOn(ctx context.Context, e *Env, cfg Config, run []scenario) ([]Row, error) {
	cfg.Log = cmp.Or(cfg.Log, io.Discard)
	setup := newHTTPClient(5*time.Second, 4)
	defer setup.CloseIdleConnections()
	if err := admin(ctx, e, setup, "/v1/events/"+probeEvent, map[string]any{"max_active": 1000000}); err != nil {
		return nil, err
	}
	if err := admin(ctx, e, setup, "/v1/campaigns/"+probeCamp, map[string]any{"stock": 100000000}); err != nil {
		return nil, err
	}
	var rows []Row
	for _, s := range run {
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		t0 := time.Now()
		row := runScenario(ctx, e, cfg, s)
		rows = append(rows, row)
		verdict := "held"
		if row.Failed() {
			verdict = "FAILED"
		}
		fmt.Fprintf(cfg.Log, "chaos: %-20s %s in %.1fs (recovery %s; %s)\n", s.name, verdict, time.Since(t0).Seconds(), row.recoveryCell(), row.Activity)
		if err := e.heal(ctx); err != nil {
			return rows, fmt.Errorf("after %s the deployment could not be put back in order: %w", s.name, err)
		}
	}
	return rows, nil
}

const usage = `Usage: waitroom chaos [flags]

The fault-injection suite. Starts its own redis-server (a private port, a temporary directory),
its own PostgreSQL database on --postgres's server (dropped at the end), a fault proxy in front of
each, and 3 waitroom serve processes; then runs each scenario in turn: a fresh event and coupon
campaign, line users and coupon entrants keeping their own histories, the fault on, off, the
time to recover, and the invariants checked from SQL and the clients' histories. Prints one
table (scenario x invariant); exit code 1 if any invariant failed or a scenario did not recover.

Scenarios: ` + "%s" + `

WAITROOM_CHAOS_KEEP=1 keeps the temporary directory (redis.log, serve-N.log) for a look after.

Flags:
`

// Command is `waitroom chaos`. --help prints the usage to stdout and returns flag.ErrHelp; a
// bad command line (unknown flag or scenario, stray argument) returns a cmdflag.UsageError.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cmdflag.New("chaos", fmt.Sprintf(usage, strings.Join(ScenarioNames(), ", ")))
	short := fs.Bool("short", false, "small crowds and short faults (every scenario within 5 minutes)")
	binary := fs.String("binary", "", "waitroom executable to start as serve (default: this executable)")
	only := fs.String("only", "", "comma-separated scenarios to run (default: all)")
	lineUsers := fs.Int("line-users", 0, "line users per scenario (default 30 with --short, else 300)")
	entrants := fs.Int("entrants", 0, "coupon entrants per scenario (default 30 with --short, else 300)")
	faultFor := fs.Duration("fault-for", 0, "how long a fault stays on (default 3s with --short, else 10s)")
	pgURL := fs.String("postgres", envOr("WAITROOM_CHAOS_POSTGRES_URL", DefaultPostgresURL), "maintenance database of the local PostgreSQL server")
	redisServer := fs.String("redis-server", "redis-server", "redis-server executable")
	histories := fs.String("histories", "", "directory to write each scenario's client histories to (JSON)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args, stdout); err != nil {
		return err
	}
	if *lineUsers < 0 || *entrants < 0 || *faultFor < 0 {
		return cmdflag.Usagef("--line-users, --entrants and --fault-for must not be negative (0 = the default)")
	}
	cfg := FullConfig()
	if *short {
		cfg = ShortConfig()
	}
	if *lineUsers > 0 {
		cfg.LineUsers = *lineUsers
	}
	if *entrants > 0 {
		cfg.Entrants = *entrants
	}
	if *faultFor > 0 {
		cfg.FaultFor = *faultFor
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			if s = strings.TrimSpace(s); s != "" {
				if !slices.Contains(ScenarioNames(), s) {
					return cmdflag.Usagef("--only: unknown scenario %q (have %s)", s, strings.Join(ScenarioNames(), ", "))
				}
				cfg.Only = append(cfg.Only, s)
			}
		}
	}
	cfg.Binary = *binary
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this executable (give --binary): %w", err)
		}
		cfg.Binary = exe
	}
	cfg.PostgresURL, cfg.RedisServer, cfg.HistoryDir = *pgURL, *redisServer, *histories
	if !*quiet {
		cfg.Log = stderr
	}
	rows, err := Run(ctx, cfg)
	if len(rows) > 0 {
		WriteTable(stdout, rows)
	}
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range rows {
		if r.Failed() {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios broke an invariant or did not recover", failed, len(rows))
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const usageHeader = `Usage: waitroom bench [flags]

Measures the hot paths against baselines measured in the same run on this machine and prints
one line per target (docs/scaling.md explains each): the figure, the baseline, the ratio, and HOLDS or NOT MET.
Needs a standalone Redis, redis-benchmark (Debian: redis-tools) and, for the http, guarded, ws
and fleet groups, a PostgreSQL server on which it creates (and drops) a database. It starts its
own waitroom instances (this binary) and deletes every Redis key it made. Takes a few minutes
(the fleet group about three more).

Groups: join (Go store and join.lua against their ceilings), admit, memory, status, http,
guarded (HTTP joins carrying a proof-of-work challenge against joins without one), ws (one
instance's WebSockets), fleet (ws/fleet: --fleet-sockets WebSockets over several instances
and several client processes, each under the open-file limit), gate (the gate's proxy for an
admitted visitor against a bare httputil.ReverseProxy); and, only when named (--only instr), instr:
the instructions per call of join.lua, status.lua and the seed's enter in a private
redis-server under valgrind's callgrind (a minute or two; needs valgrind).

Progress goes to stderr, the report to stdout; the exit code is 1 when a target is not met or
could not be measured (with --quick: only when one could not be measured).

Flags:
`

// Command runs `waitroom bench` with args (the flags after "bench"). --help prints the usage
// to stdout and returns flag.ErrHelp; a bad command line returns a cmdflag.UsageError.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg        Config
		only       string
		bare       bool
		bareAddr   string
		bareBytes  int
		quick      bool
		httpSecond int
	)
	fs := cmdflag.New("bench", usageHeader)
	fs.StringVar(&cfg.RedisURL, "redis", envOr("WAITROOM_REDIS_URL", "redis://127.0.0.1:6379"), "Redis `URL` (one standalone server; $WAITROOM_REDIS_URL when set)")
	fs.StringVar(&cfg.DatabaseURL, "database", envOr("WAITROOM_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL server `URL` on which the http, guarded and ws groups create their database ($WAITROOM_DATABASE_URL when set)")
	fs.StringVar(&only, "only", "", "comma-separated `groups` to run (default all: "+strings.Join(Groups, ",")+")")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "interleaved `rounds` per comparison (medians are compared)")
	fs.IntVar(&cfg.Calls, "calls", 300_000, "`calls` per redis-benchmark run and per Go store run")
	fs.IntVar(&cfg.Waiting, "waiting", 1_000_000, "line length of the memory and status targets")
	fs.IntVar(&cfg.AdmitLine, "admit-line", 200_000, "line length of the admission target")
	fs.IntVar(&cfg.WSConns, "ws-conns", 20_000, "WebSocket connections of the push target")
	fs.IntVar(&cfg.FleetSockets, "fleet-sockets", fleetTarget, "WebSockets of the fleet target (ws/fleet), over several instances and client processes")
	fs.IntVar(&httpSecond, "http-seconds", 5, "`seconds` of one HTTP measurement")
	fs.StringVar(&cfg.BaselineDir, "baselines", "", "read seed-enter.lua and seed-admit.lua from this `folder` (default: the copies embedded from internal/bench/baseline)")
	fs.StringVar(&cfg.Executable, "exe", "", "the waitroom `binary` the http, guarded and ws groups start (default: this one)")
	fs.StringVar(&cfg.Compare, "compare", "", "an older waitroom `binary` the http group also measures, in the same rounds, beside --exe's (before/after)")
	fs.BoolVar(&quick, "quick", false, "a quick check that everything runs: small sizes, one round (the figures mean little)")
	fs.BoolVar(&bare, "serve-bare", false, "internal: serve the bare HTTP baseline on --addr (the http group starts it)")
	var hold bool
	fs.BoolVar(&hold, "ws-hold", false, "internal: a client process of the fleet target (WebSocket URLs on stdin; the fleet group starts it)")
	fs.StringVar(&bareAddr, "addr", "127.0.0.1:0", "internal: listen address of --serve-bare")
	fs.IntVar(&bareBytes, "bare-body-bytes", 300, "internal: body size of --serve-bare")
	if err := fs.Parse(args, stdout); err != nil {
		return err
	}
	if bare {
		return ServeBare(ctx, bareAddr, bareBytes)
	}
	if hold {
		return HoldWebSockets(ctx, os.Stdin, stdout, fleetHoldLimit)
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"rounds", cfg.Rounds}, {"calls", cfg.Calls}, {"waiting", cfg.Waiting}, {"admit-line", cfg.AdmitLine},
		{"ws-conns", cfg.WSConns}, {"fleet-sockets", cfg.FleetSockets}, {"http-seconds", httpSecond}} {
		if n.v < 1 {
			return cmdflag.Usagef("--%s must be at least 1 (got %d)", n.flag, n.v)
		}
	}
	for _, g := range strings.Split(only, ",") {
		if g = strings.TrimSpace(g); g == "" {
			continue
		}
		if !contains(Groups, g) && g != "instr" {
			return cmdflag.Usagef("unknown group %q in --only (groups: %s)", g, strings.Join(Groups, ","))
		}
		cfg.Only = append(cfg.Only, g)
	}
	cfg.HTTPDuration = time.Duration(httpSecond) * time.Second
	if quick {
		cfg.Rounds, cfg.Calls, cfg.Waiting, cfg.AdmitLine, cfg.WSConns, cfg.FleetSockets = 1, 50_000, 50_000, 60_000, 1_000, 2_000
		cfg.HTTPDuration = time.Second
	}
	cfg.Progress = stderr
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		fmt.Fprintf(stdout, "waitroom bench, %s, %s\n", time.Now().UTC().Format(time.RFC3339), rep.Machine)
		rep.Write(stdout)
		fmt.Fprintf(stdout, "(%s)\n", time.Since(start).Round(time.Second))
	}
	if err != nil {
		return err
	}
	if quick {
		// Small sizes and one round: the verdicts say little, so only a target that could not
		// be measured fails the check.
		fmt.Fprintln(stdout, "quick run: small sizes, one round; the verdicts are indicative only (run without --quick to measure the targets)")
		if n := rep.Errors(); n > 0 {
			return fmt.Errorf("%d target(s) could not be measured", n)
		}
		return nil
	}
	if n := rep.NotMet(); n > 0 {
		return fmt.Errorf("%d target(s) not met", n)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

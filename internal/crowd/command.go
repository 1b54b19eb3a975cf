package crowd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const usageHeader = `Usage: waitroom crowd --target URL[,URL...] --event ID --users N [flags]

Releases a flash crowd of simulated users on an event of one or more waitroom instances: each
user joins the line, polls its ticket as poll_after_s says (with --push: waits on the ticket's
WebSocket, polling only if it fails) until it is admitted or its ticket ends, stays --hold,
and leaves. User i starts on target i % (number of targets); the targets must share one line
(one store). Users heal by themselves: a failed request (no answer within --request-timeout,
5xx, 429) is retried with a jittered back-off on the next target, a ticket that answers 404
twice (the store lost it) is joined again with the same Idempotency-Key, and a push socket
that closes or stays silent (--push-silence) is replaced on the next target. The event is created with the settings below if it does not
exist (this needs the admin key); an existing event is used as it is.

--bots N runs hostile clients beside the users (--bot-mode), each from an address of
--bot-addrs; --user-addrs spreads the users over addresses of their own, so that the server's
limits per client see a crowd. The report sets what the bots got beside what the limits allow.

Prints progress to stderr and a summary to stdout; exits non-zero when users were lost at the
deadline, the line broke FIFO order, any 5xx was seen, users gave up after errors, bots got
more than the limits allow, or /healthz failed (or was slower than --healthz-max).

Flags:
`

// Command runs `waitroom crowd` with args (the flags after "crowd"). --help prints the usage
// to stdout and returns flag.ErrHelp; a bad command line (unknown flag, stray argument, invalid
// setting) returns a cmdflag.UsageError. After the run it prints the summary to stdout, writes
// the JSON report if --json is set, and returns an error when Report.Problems is not empty.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	var targets targetList
	var jsonPath string

	fs := cmdflag.New("crowd", usageHeader)
	fs.Var(&targets, "target", "base `URL`s of the waitroom instances, comma-separated or the flag repeated (required)")
	fs.StringVar(&cfg.Event, "event", "", "event `ID` (required)")
	fs.IntVar(&cfg.Users, "users", 1000, "`number` of simulated users (0 with --bots: the bots alone, until the deadline or an interrupt, e.g. in a process of their own beside a crowd of users)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "joins started per second (0 = as fast as --concurrency allows)")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "maximum HTTP requests in flight at once, across all users")
	fs.DurationVar(&cfg.Deadline, "deadline", cfg.Deadline, "time limit of the whole run; at the deadline the run stops and reports")
	fs.StringVar(&jsonPath, "json", "", "write the JSON report to `file`")
	fs.DurationVar(&cfg.Hold, "hold", 0, "how long an admitted user stays before leaving")
	fs.StringVar(&cfg.AdminKey, "admin-key", "", "admin API `key`, to create the event and for --named (default $WAITROOM_ADMIN_KEY)")
	fs.Int64Var(&cfg.MaxActive, "max-active", cfg.MaxActive, "max_active of the event, if it is created")
	fs.Float64Var(&cfg.AdmitRate, "admit-rate", cfg.AdmitRate, "admit_rate (per second) of the event, if it is created")
	fs.IntVar(&cfg.SessionTTL, "session-ttl", cfg.SessionTTL, "session_ttl_s of the event in `seconds`, if it is created")
	fs.IntVar(&cfg.ClaimTTL, "claim-ttl", cfg.ClaimTTL, "claim_ttl_s of the event in `seconds`, if it is created")
	fs.StringVar(&cfg.UserPrefix, "user-prefix", "", "prefix of user ids for --named (default random)")
	fs.BoolVar(&cfg.Named, "named", false, `join server-to-server with the admin key and {"user_id": "<prefix>-<i>"} instead of anonymously`)
	fs.BoolVar(&cfg.Book, "book", false, "admitted users hold 1-4 random seats (retrying on conflict) and book them; reports oversold, double_booked and the sell-out time")
	fs.IntVar(&cfg.Seats, "seats", 5000, "seats of the event, if it is created (with --book)")
	fs.BoolVar(&cfg.Push, "push", false, "queued users wait on the ticket's WebSocket instead of polling; reports push_latency_ms")
	fs.DurationVar(&cfg.PushSilence, "push-silence", cfg.PushSilence, "with --push, a socket silent for half of this is pinged, and replaced when the pong does not come within the other half")
	fs.Float64Var(&cfg.PollScale, "poll-scale", cfg.PollScale, "multiply poll_after_s by this (never below 50ms); only for experiments")
	fs.BoolVar(&cfg.Presolve, "presolve", false, "for an event with a proof-of-work challenge: every user solves its challenge before the run starts (as a page can while it loads) and the time to admission counts from the join")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "a request taking longer counts as a transport error")

	var gates targetList
	var gcfg GateConfig
	fs.Var(&gates, "gate", "gate mode: base `URL`s of gates (serve --gate) to send visitors through to the site behind them, instead of the API's --target (see --gate-path)")
	fs.StringVar(&gcfg.Path, "gate-path", "/shop", "gate mode: the protected `path` visitors request")
	fs.IntVar(&gcfg.Requests, "gate-requests", 10, "gate mode: requests each admitted visitor makes to the origin, the last to /done (which an origin answers with Waitroom-Command: complete)")
	fs.DurationVar(&gcfg.ThinkTime, "gate-think", 400*time.Millisecond, "gate mode: pause after each answer of the origin")
	fs.StringVar(&gcfg.InsideFile, "gate-inside-file", "", "gate mode: count the visitors inside in this `file` of 16 bytes, shared with the crowd's other processes (set by --procs)")
	fs.IntVar(&gcfg.MaxConnsPerTarget, "gate-max-conns", 0, "gate mode: at most this many connections to each gate (0 = no cap; requests beyond wait for one)")

	var userAddrs, botAddrs, botMode string
	fs.StringVar(&userAddrs, "user-addrs", "", "source `CIDR` of the users: user i binds its address i mod its size (e.g. 127.0.1.0/24: 256 clients to the server); default: the system's address, and an event the run creates lifts its limits per client")
	fs.IntVar(&cfg.Bots.N, "bots", 0, "`number` of bots run alongside the users (see --bot-mode)")
	fs.StringVar(&botMode, "bot-mode", "", "what the bots do: stuff (join as fast as possible), squat (hold admitted slots by polling), connections (open as many push connections as possible), hoard (buy as many units as possible, joining again after each booking)")
	fs.StringVar(&botAddrs, "bot-addrs", "", "source `CIDR` of the bots: bot i binds its address i mod its size (a single address puts every bot on it)")
	fs.IntVar(&cfg.Bots.Concurrency, "bot-concurrency", DefaultBotConcurrency, "requests in flight per bot")
	fs.DurationVar(&cfg.HealthzProbe, "healthz-probe", 0, "GET every target's /healthz this often during the run and report the latency (0 = no probe)")
	fs.IntVar(&cfg.Procs, "procs", 1, "run the users in this many processes of this binary, each with its share of the users and of --user-addrs, and merge their reports (a process may open only so many files, and each waiting --push user holds one)")
	fs.DurationVar(&cfg.HealthzMax, "healthz-max", 0, "with --healthz-probe: a probe slower than this, or failed, fails the run (0 = report only)")

	if err := fs.Parse(args, stdout); err != nil {
		return err
	}
	if len(gates) > 0 {
		gcfg.Targets, gcfg.Users, gcfg.Rate, gcfg.PollScale, gcfg.Deadline, gcfg.RequestTimeout = gates, cfg.Users, cfg.Rate, cfg.PollScale, cfg.Deadline, cfg.RequestTimeout
		var rep GateReport
		var err error
		if gcfg.UserAddrs, err = parsePrefix(userAddrs); err != nil {
			return cmdflag.Usagef("--user-addrs: %w", err)
		}
		if cfg.Procs > 1 {
			var exe string
			if exe, err = os.Executable(); err == nil {
				rep, err = RunGateProcs(ctx, gcfg, cfg.Procs, exe, stderr)
			}
		} else {
			rep, err = RunGate(ctx, gcfg)
		}
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, rep.String())
		if jsonPath != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if err := os.WriteFile(jsonPath, b, 0o644); err != nil {
				return fmt.Errorf("writing the report: %w", err)
			}
		}
		if p := rep.Problems(); len(p) > 0 {
			return errors.New(strings.Join(p, "; "))
		}
		return nil
	}
	cfg.Targets = targets
	var err error
	if cfg.UserAddrs, err = parsePrefix(userAddrs); err != nil {
		return cmdflag.Usagef("--user-addrs: %w", err)
	}
	if cfg.Bots.Addrs, err = parsePrefix(botAddrs); err != nil {
		return cmdflag.Usagef("--bot-addrs: %w", err)
	}
	cfg.Bots.Mode = BotMode(botMode)
	cfg.AdminKey = cmp.Or(cfg.AdminKey, os.Getenv("WAITROOM_ADMIN_KEY"))
	if cfg.PollScale == 0 {
		return cmdflag.Usagef("--poll-scale must be positive")
	}
	if err := cfg.WithDefaults().validate(); err != nil {
		return cmdflag.UsageError{Err: err} // Run checks again; here it is the command line's fault
	}

	var rep Report
	if cfg.Procs > 1 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		rep, err = runProcs(ctx, cfg, exe, args, stderr)
		if err != nil {
			return err
		}
	} else {
		var err error
		if rep, err = Run(ctx, cfg, stderr); err != nil {
			return err // the caller names the command ("waitroom crowd: ...")
		}
	}
	rep.writeSummary(stdout)
	if jsonPath != "" {
		if err := writeJSON(jsonPath, rep); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	if p := rep.Problems(); len(p) > 0 {
		return errors.New(strings.Join(p, ", "))
	}
	return nil
}

func writeJSON(path string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// targetList is the --target flag: each use adds its comma-separated URLs.
type targetList []string

func (l *targetList) String() string { return strings.Join(*l, ",") }

func (l *targetList) Set(v string) error {
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			*l = append(*l, t)
		}
	}
	return nil
}

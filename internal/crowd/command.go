package crowd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const usageHeader = `Usage: waitroom crowd --target URL[,URL...] --event ID --users N [flags]

Releases a flash crowd of simulated users on an event of one or more waitroom instances: each
user joins the line, polls its ticket as poll_after_s says (with --push: waits on the ticket's
WebSocket, polling only if it fails) until it is admitted or its ticket ends, stays --hold,
and leaves. User i talks to target i % (number of targets); the targets
must share one line (one store). The event is created with the settings below if it does not
exist (this needs the admin key); an existing event is used as it is.

Prints progress to stderr and a summary to stdout; exits non-zero when users were lost at the
deadline, the line broke FIFO order, any 5xx was seen, or users gave up after errors.

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
	fs.IntVar(&cfg.Users, "users", 1000, "`number` of simulated users")
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
	fs.Float64Var(&cfg.PollScale, "poll-scale", cfg.PollScale, "multiply poll_after_s by this (never below 50ms); only for experiments")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "a request taking longer counts as a transport error")

	if err := fs.Parse(args, stdout, stderr); err != nil {
		return err
	}
	cfg.Targets = targets
	if cfg.AdminKey == "" {
		cfg.AdminKey = os.Getenv("WAITROOM_ADMIN_KEY")
	}
	if cfg.PollScale == 0 {
		return cmdflag.Usagef("--poll-scale must be positive")
	}
	if err := cfg.WithDefaults().validate(); err != nil {
		return cmdflag.UsageError{Err: err} // Run checks again; here it is the command line's fault
	}

	rep, err := Run(ctx, cfg, stderr)
	if err != nil {
		return err // the caller names the command ("waitroom crowd: ...")
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

package autoexp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const usageHeader = `waitroom auto-experiment: admission mode auto against a simulated origin of capacity C
(unknown to Waitroom): settle, halve the capacity, restore it; one line per C (docs/autoadmit.md).

Usage: waitroom auto-experiment [flags]
`

// Command runs `waitroom auto-experiment`: it prints one line per capacity and returns an error
// when a figure is not met.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg Config
	var caps, jsonPath string
	fs := cmdflag.New("auto-experiment", usageHeader)
	fs.StringVar(&caps, "capacities", "50,200,1000", "the origin's capacities C to try, requests/s, comma-separated")
	fs.IntVar(&cfg.Instances, "instances", 1, "1 (embedded line) or more (instances sharing --redis-url and a database of their own on --database-url)")
	fs.StringVar(&cfg.RedisURL, "redis-url", "redis://127.0.0.1:6379", "Redis of the instances (with --instances > 1); keys under a fresh prefix, deleted at the end")
	fs.StringVar(&cfg.DatabaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server where a database of the run is created and dropped (with --instances > 1)")
	fs.DurationVar(&cfg.Service, "service", 0, "the origin's mean service time (default 100ms); its servers are C x this")
	fs.DurationVar(&cfg.Target, "target", 0, "the objective's p95 (default 500ms)")
	fs.DurationVar(&cfg.Settle, "settle", 0, "length of the first phase (default 90s)")
	fs.DurationVar(&cfg.Halved, "halved", 0, "length of the phase with half the servers (default 40s)")
	fs.DurationVar(&cfg.Restored, "restored", 0, "length of the phase with the servers restored (default 60s)")
	fs.Float64Var(&cfg.Allowed, "allowed", 0, "take this as the most load the objective allows (requests/s) instead of measuring it (a quicker run, not a figure)")
	fs.IntVar(&cfg.CrowdProcs, "crowd-procs", 0, "run the crowd as this many processes of this binary (waitroom crowd --gate) instead of in the instances' process (0); they count the visitors inside together")
	fs.StringVar(&jsonPath, "json", "", "write every result, with its seconds, to `file`")
	trace := fs.Bool("trace", false, "print the controller's state every second (to stderr)")
	if err := fs.Parse(args, stdout); err != nil {
		return err
	}
	for _, c := range strings.Split(caps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return cmdflag.Usagef("--capacities: %q is not a positive number", c)
		}
		cfg.Capacities = append(cfg.Capacities, n)
	}
	cfg.Log = stderr
	if *trace {
		cfg.Trace = stderr
	}
	cfg = cfg.withDefaults()
	var results []Result
	failed := 0
	for _, c := range sortedCaps(cfg.Capacities) {
		r, err := RunCapacity(ctx, cfg, c)
		if err != nil {
			return fmt.Errorf("C=%d: %w", c, err)
		}
		fmt.Fprintln(stdout, r.Line(cfg.Target))
		if len(r.Holds(cfg.Target)) > 0 {
			failed++
		}
		results = append(results, r)
	}
	if jsonPath != "" {
		b, _ := json.MarshalIndent(results, "", " ")
		if err := os.WriteFile(jsonPath, b, 0o644); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d capacities did not meet the figures", failed, len(results))
	}
	return nil
}

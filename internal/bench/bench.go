// Package bench is `waitroom bench`: it measures the service's hot paths against baselines
// measured in the same run on the same machine, and prints one line per target of issue 5:
// the figure, the baseline, their ratio, and whether the target holds.
//
// Every target is a ratio because absolute times on a shared machine drift; each pair of
// figures is measured in interleaved rounds (the median of each side is compared), so that a
// neighbour's burst of load hits both sides alike. The baselines are Lua restatements of the
// source designs (baseline/*.lua, copied from ../shared/bench/) run on the same Redis, a bare
// Go net/http handler, and redis-benchmark itself: the rate at which Redis runs a script when
// a C client pipelines 32 deep is the ceiling no client of that script can pass.
//
// Everything it creates is removed before it returns: its Redis keys (one random prefix), the
// PostgreSQL database of the instance it starts, and the processes it starts. Every load
// loop is bounded in count and in time.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Config is one run of the benchmark.
type Config struct {
	// RedisURL is the Redis to measure (standalone: redis-benchmark needs one address).
	RedisURL string
	// DatabaseURL is a PostgreSQL server URL; the HTTP targets create a database on it for
	// the instance they start and drop it afterwards.
	DatabaseURL string
	// Only lists the groups to run (see Groups); empty = all.
	Only []string
	// Rounds is how many interleaved rounds each comparison takes the median of. Defaults to 3.
	Rounds int
	// Calls is the number of calls of one redis-benchmark run. Defaults to 300,000.
	Calls int
	// Waiting is the line length of the memory and status targets. Defaults to 1,000,000.
	Waiting int
	// AdmitLine is the line length of the admission target. Defaults to 200,000.
	AdmitLine int
	// WSConns is the number of WebSocket connections. Defaults to 20,000 (fewer when the
	// open-file limit does not allow it; the line says so).
	WSConns int
	// FleetSockets is the number of WebSockets of the fleet target (ws/fleet). Defaults to
	// 100,000.
	FleetSockets int
	// HTTPDuration is the length of one HTTP measurement. Defaults to 5 s.
	HTTPDuration time.Duration
	// BaselineDir reads seed-enter.lua and seed-admit.lua from this folder instead of the
	// embedded copies.
	BaselineDir string
	// Executable is the waitroom binary to start for the HTTP targets. Defaults to this
	// process's own executable.
	Executable string
	// Compare is an older waitroom binary whose instance (on Redis, a key prefix and a
	// database of its own) the http group measures beside Executable's in the same rounds
	// ("" = none).
	Compare string
	// Progress receives progress messages (nil = discard).
	Progress io.Writer
}

// Groups of targets, in the order they run.
var Groups = []string{"join", "admit", "memory", "status", "http", "guarded", "ws", "fleet", "gate"}

func (c Config) withDefaults() Config {
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Calls <= 0 {
		c.Calls = 300_000
	}
	if c.Waiting <= 0 {
		c.Waiting = 1_000_000
	}
	if c.AdmitLine <= 0 {
		c.AdmitLine = 200_000
	}
	if c.WSConns <= 0 {
		c.WSConns = 20_000
	}
	if c.FleetSockets <= 0 {
		c.FleetSockets = fleetTarget
	}
	if c.HTTPDuration <= 0 {
		c.HTTPDuration = 5 * time.Second
	}
	c.Progress = cmp.Or(c.Progress, io.Discard)
	return c
}

func (c Config) runs(group string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, group) }

// Outcome of a target.
type Outcome string

// Outcomes.
const (
	Holds       Outcome = "HOLDS"
	NotMet      Outcome = "NOT MET"
	Unavailable Outcome = "N/A" // the thing measured does not exist here (e.g. no push route)
	Failed      Outcome = "ERROR"
)

// Result is one target's line.
type Result struct {
	ID      string
	Outcome Outcome
	Text    string // figure, baseline, ratio and target, in words
}

// Info is a measured figure that is not a target (per-operation costs for docs/scaling.md).
type Info struct {
	Name, Value string
}

// Report is what a run measured.
type Report struct {
	Machine string // CPUs, Go, Redis version, load at the start
	Results []Result
	Info    []Info
	Notes   []string
}

func (r *Report) add(id string, o Outcome, format string, a ...any) {
	r.Results = append(r.Results, Result{ID: id, Outcome: o, Text: fmt.Sprintf(format, a...)})
}

func (r *Report) info(name, format string, a ...any) {
	r.Info = append(r.Info, Info{Name: name, Value: fmt.Sprintf(format, a...)})
}

func (r *Report) fail(id string, err error) { r.add(id, Failed, "%v", err) }

// NotMet counts the targets that were measured and do not hold, or could not be measured.
func (r *Report) NotMet() int {
	n := 0
	for _, x := range r.Results {
		if x.Outcome == NotMet || x.Outcome == Failed {
			n++
		}
	}
	return n
}

// Errors counts the targets that could not be measured.
func (r *Report) Errors() int {
	n := 0
	for _, x := range r.Results {
		if x.Outcome == Failed {
			n++
		}
	}
	return n
}

// Write prints the target lines, then the other figures.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintln(w, "targets (figure vs baseline measured in the same run; ratio; target):")
	for _, x := range r.Results {
		fmt.Fprintf(w, "  %-8s %-14s %s\n", x.Outcome, x.ID, x.Text)
	}
	if len(r.Info) > 0 {
		fmt.Fprintln(w, "measured along the way:")
		for _, x := range r.Info {
			fmt.Fprintf(w, "  %-34s %s\n", x.Name, x.Value)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// holds returns Holds when ok, else NotMet.
func holds(ok bool) Outcome {
	if ok {
		return Holds
	}
	return NotMet
}

// median of xs (NaN when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rates formats rates as "a, b, c /s".
func rates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// thousands formats n with thin separators (12,345).
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Run measures the groups of cfg and returns the report. Errors are those that prevent any
// measurement (no Redis); a target that cannot be measured is an ERROR line instead.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	env, err := newEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()
	rep := &Report{Machine: env.machine(ctx)}
	steps := []struct {
		group string
		run   func(context.Context, *Report)
	}{
		{"join", env.joinTargets},
		{"admit", env.admitTargets},
		{"memory", env.memoryTargets},
		{"status", env.statusTargets},
		{"http", env.httpTargets},
		{"guarded", env.guardedTargets},
		{"ws", env.wsTargets},
		{"fleet", env.fleetTargets},
		{"gate", env.gateTargets},
		{"instr", env.instrTargets}, // only when named (--only instr): it needs valgrind
	}
	for _, s := range steps {
		if !cfg.runs(s.group) || (s.group == "instr" && !slices.Contains(cfg.Only, "instr")) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		env.progress("== %s", s.group)
		s.run(ctx, rep)
	}
	rep.Notes = append(rep.Notes, env.notes...)
	return rep, ctx.Err()
}

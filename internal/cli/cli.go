// Package cli is the waitroom command line: it alone reads flags and the environment, and
// wires the components together.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/waitroom/waitroom/internal/bench"
	"github.com/waitroom/waitroom/internal/buildinfo"
	"github.com/waitroom/waitroom/internal/chaos"
	"github.com/waitroom/waitroom/internal/cmdflag"
	"github.com/waitroom/waitroom/internal/crowd"
	"github.com/waitroom/waitroom/internal/draw"
)

const usage = `waitroom: a fair FIFO waiting room for flash crowds.

Usage:
  waitroom serve [flags]      run the service (no flags: embedded line + SQLite file ./waitroom.db)
  waitroom crowd [flags]      send a flash crowd at running instances and report what clients saw
  waitroom reconcile [flags]  rebuild Redis's sold state of every event from the database
  waitroom bench [flags]      measure the hot paths against same-run baselines (local Redis)
  waitroom verify-draw [flags] check a revealed draw seed and recompute every place (docs/draw.md)
  waitroom version            the version, commit and build date (also: waitroom --version)
  waitroom chaos [flags]      the fault-injection suite: faults on Redis, PostgreSQL, instances
  waitroom help               this text

Run "waitroom <command> --help" for a command's flags.
`

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr)
	case "crowd":
		err = crowd.Command(ctx, args[1:], stdout, stderr)
	case "reconcile":
		err = reconcile(ctx, args[1:], stdout, stderr)
	case "chaos":
		err = chaos.Command(ctx, args[1:], stdout, stderr)
	case "bench":
		err = bench.Command(ctx, args[1:], stdout, stderr)
	case "verify-draw":
		return draw.Command(args[1:], os.Stdin, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "waitroom: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "waitroom %s: %v\n", args[0], err)
		return 2
	}
	fmt.Fprintf(stderr, "waitroom %s: %v\n", args[0], err)
	return 1
}

// usageError is a mistake in the command line or environment (exit code 2); bench and crowd
// return the same type.
type usageError = cmdflag.UsageError

func usagef(format string, a ...any) error { return cmdflag.Usagef(format, a...) }

// envOr returns the environment variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// flagError is a flag-parsing error as the exit-code rule wants it: -h/--help as is (exit 0),
// anything else a usage error (exit 2).
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{Err: err}
}

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
	"slices"
	"strings"
	"syscall"

	"github.com/waitroom/waitroom/internal/autoexp"
	"github.com/waitroom/waitroom/internal/bench"
	"github.com/waitroom/waitroom/internal/buildinfo"
	"github.com/waitroom/waitroom/internal/chaos"
	"github.com/waitroom/waitroom/internal/cmdflag"
	"github.com/waitroom/waitroom/internal/crowd"
	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/originsim"
)

const usage = `waitroom: a fair FIFO waiting room for flash crowds.

Usage:
  waitroom serve [flags]            run the service (no flags: embedded line + SQLite file ./waitroom.db)
  waitroom crowd [flags]            send a flash crowd at running instances and report what clients saw
  waitroom reconcile [flags]        rebuild Redis's sold state of every event from the database
  waitroom bench [flags]            measure the hot paths against same-run baselines (local Redis)
  waitroom verify-draw [flags]      check a revealed draw seed and recompute every place (docs/draw.md)
  waitroom version                  the version, commit and build date (also: waitroom --version)
  waitroom chaos [flags]            the fault-injection suite: faults on Redis, PostgreSQL, instances
  waitroom origin [flags]           a simulated origin of a given capacity, changeable while it runs
  waitroom auto-experiment [flags]  admission mode auto against simulated origins (docs/autoadmit.md)
  waitroom help [command]           this text, or the command's flags

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
	case "auto-experiment":
		err = autoexp.Command(ctx, args[1:], stdout, stderr)
	case "origin":
		err = originsim.Command(ctx, args[1:], stdout, stderr)
	case "verify-draw":
		return draw.Command(args[1:], os.Stdin, stdout, stderr)
	case "version", "--version", "-version":
		if len(args) == 2 && slices.Contains([]string{"-h", "--help", "-help"}, args[1]) {
			fmt.Fprint(stdout, "Usage: waitroom version\n\nPrints the version, the commit and the build date (also: waitroom --version). No flags.\n")
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "waitroom version: unexpected arguments %q\n", args[1:])
			return 2
		}
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	case "help", "-h", "--help", "-help":
		switch {
		case len(args) == 2 && !strings.HasPrefix(args[1], "-") && args[1] != "help": // waitroom help serve
			return Main([]string{args[1], "--help"}, stdout, stderr)
		case len(args) > 1 && !slices.Contains([]string{"-h", "--help", "-help"}, args[1]):
			fmt.Fprintf(stderr, "waitroom help: unexpected arguments %q\n", args[1:])
			return 2
		}
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
	fmt.Fprintf(stderr, "waitroom %s: %v\n", args[0], err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// usageError is a mistake in the command line or environment (exit code 2); bench and crowd
// return the same type.
type usageError = cmdflag.UsageError

func usagef(format string, a ...any) error { return cmdflag.Usagef(format, a...) }

// Package cmdflag parses the flags of a waitroom subcommand (bench, crowd) the same way each
// time, and carries the command line's exit-code rule (see cli.Main): a nil error exits 0,
// flag.ErrHelp (-h, --help) exits 0, a [UsageError] exits 2, any other error exits 1.
package cmdflag

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
)

// UsageError is a mistake in the command line or environment (an unknown flag, a bad value, a
// stray argument): the command exits with code 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a [UsageError] with the message fmt.Errorf(format, a...).
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// FlagSet is a flag.FlagSet whose usage text is a fixed header followed by the flags' defaults.
// Define the flags on the embedded FlagSet, then call [FlagSet.Parse].
type FlagSet struct {
	*flag.FlagSet
	usage bytes.Buffer
}

// New returns an empty FlagSet for the command name (e.g. "crowd"); header is the usage text
// printed before the flags (it ends with "Flags:\n").
func New(name, header string) *FlagSet {
	fs := &FlagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.SetOutput(&fs.usage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), header)
		PrintDefaults(fs.FlagSet)
	}
	return fs
}

// PrintDefaults writes fs's flags as flag.PrintDefaults does, each named with two dashes
// (--addr), as the usage headers, the serve command's help and the docs name them (the flag
// package takes -addr and --addr alike).
func PrintDefaults(fs *flag.FlagSet) {
	var b bytes.Buffer
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	// PrintDefaults starts each flag's line with "  -" and each continuation with "    \t".
	_, _ = out.Write(flagLine.ReplaceAll(b.Bytes(), []byte("  --")))
}

var flagLine = regexp.MustCompile(`(?m)^  -`)

// Parse parses args, which are flags only:
//   - -h or --help writes the usage to stdout and returns flag.ErrHelp;
//   - an unknown or malformed flag writes the flag package's message and the usage to stderr
//     and returns a [UsageError] wrapping the flag package's error;
//   - a positional argument returns a [UsageError] naming it.
func (fs *FlagSet) Parse(args []string, stdout, stderr io.Writer) error {
	fs.usage.Reset()
	err := fs.FlagSet.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(fs.usage.Bytes())
		return err
	case err != nil:
		_, _ = stderr.Write(fs.usage.Bytes())
		return UsageError{err}
	case fs.NArg() > 0:
		return Usagef("unexpected arguments %q (flags only; see --help)", fs.Args())
	}
	return nil
}

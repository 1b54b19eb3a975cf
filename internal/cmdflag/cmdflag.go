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
	"strings"
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
	// Unknown, when set, returns a line of advice for a flag the set does not define (name
	// without dashes; "" for none): serve's says that a secret comes from the environment.
	Unknown func(name string) string
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

// Dashes rewrites the flags that the flag package's error messages name with one dash (-x)
// with two (--x), as the help names them.
func Dashes(msg []byte) []byte { return dashes.ReplaceAll(msg, []byte("$1--$2")) }

// dashes finds a flag named with one dash in the flag package's error messages ("flag provided
// but not defined: -x", "invalid value \"v\" for flag -x: …", "flag needs an argument: -x").
var dashes = regexp.MustCompile(`(defined: |for flag |for |argument: )-([A-Za-z0-9])`)

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
		// The flag package names flags with one dash in its messages; the help and the docs
		// use two.
		out := Dashes(fs.usage.Bytes())
		msg := string(Dashes([]byte(err.Error())))
		if name, unknown := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); unknown && fs.Unknown != nil {
			if hint := fs.Unknown(name); hint != "" {
				msg += " (" + hint + ")"
				out = append([]byte(msg+"\n"), out[bytes.IndexByte(out, '\n')+1:]...)
			}
		}
		_, _ = stderr.Write(out)
		return UsageError{errors.New(msg)}
	case fs.NArg() > 0:
		return Usagef("unexpected arguments %q (flags only; see --help)", fs.Args())
	}
	return nil
}

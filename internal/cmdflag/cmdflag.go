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
//   - an unknown or malformed flag returns a [UsageError] of one line, for the caller to print:
//     the flag package's message (flags named with two dashes), for an unknown flag the
//     FlagSet's Unknown advice or else the defined flag nearest to it ("did you mean
//     --addr?"), and where the flags are listed (the whole usage would bury the line);
//   - a positional argument returns a [UsageError] naming it.
func (fs *FlagSet) Parse(args []string, stdout io.Writer) error {
	fs.usage.Reset()
	err := fs.FlagSet.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(fs.usage.Bytes())
		return err
	case err != nil:
		// The flag package names flags with one dash in its messages; the help and the docs
		// use two.
		msg := string(Dashes([]byte(err.Error())))
		if name, unknown := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); unknown {
			name = strings.TrimPrefix(name, "-")
			name, _, _ = strings.Cut(name, "=")
			hint := ""
			if fs.Unknown != nil {
				hint = fs.Unknown(name)
			}
			if near := fs.nearest(name); hint == "" && near != "" {
				hint = "did you mean --" + near + "?"
			}
			if hint != "" {
				msg += " (" + hint + ")"
			}
		}
		return UsageError{fmt.Errorf("%s; the flags: waitroom %s --help", msg, fs.Name())}
	case fs.NArg() > 0:
		return Usagef("unexpected arguments %q (flags only; see --help)", fs.Args())
	}
	return nil
}

// nearest returns the one defined flag closest to name, a mistyped flag: the nearest within
// two edits (insertions, deletions, substitutions, swaps of neighbours), or else the only flag
// that starts with name or that name starts with (at least 3 characters each); "" when none
// is, or when two are equally near.
func (fs *FlagSet) nearest(name string) string {
	best, bestD, tie := "", 3, false
	var prefixed []string
	fs.VisitAll(func(f *flag.Flag) {
		switch d := editDistance(name, f.Name); {
		case d < bestD:
			best, bestD, tie = f.Name, d, false
		case d == bestD:
			tie = true
		}
		if len(name) >= 3 && len(f.Name) >= 3 && (strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name)) {
			prefixed = append(prefixed, f.Name)
		}
	})
	switch {
	case bestD <= 2 && !tie:
		return best
	case bestD > 2 && len(prefixed) == 1:
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance of a and b (Levenshtein's, with a swap
// of two neighbouring characters counting as one edit), over bytes: flag names are ASCII.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

package cmdflag_test

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const header = "Usage: waitroom demo [flags]\n\nFlags:\n"

func parse(args ...string) (n int, stdout string, err error) {
	fs := cmdflag.New("demo", header)
	fs.IntVar(&n, "n", 1, "a `number`")
	var out bytes.Buffer
	err = fs.Parse(args, &out)
	return n, out.String(), err
}

func TestParse(t *testing.T) {
	n, stdout, err := parse("--n", "5")
	if err != nil || n != 5 || stdout != "" {
		t.Fatalf("n %d err %v stdout %q", n, err, stdout)
	}
}

func TestParseHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		_, stdout, err := parse(arg)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: err %v, want flag.ErrHelp", arg, err)
		}
		var ue cmdflag.UsageError
		if errors.As(err, &ue) {
			t.Errorf("%s: help is not a usage error", arg)
		}
		if !strings.HasPrefix(stdout, header) || !strings.Contains(stdout, "\n  --n number") || strings.Contains(stdout, "\n  -n") {
			t.Errorf("%s: usage not on stdout: stdout %q", arg, stdout)
		}
	}
}

// TestParseUsageErrors: a mistake is one line, the flags named with two dashes, saying where
// the flags are listed; nothing is written (the usage would bury the line).
func TestParseUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--nope"}, "flag provided but not defined: --nope; the flags: waitroom demo --help"},
		{[]string{"--n", "many"}, `invalid value "many" for flag --n: parse error; the flags: waitroom demo --help`},
		{[]string{"-n"}, "flag needs an argument: --n; the flags: waitroom demo --help"},
		{[]string{"--n", "2", "extra", "more"}, `unexpected arguments ["extra" "more"] (flags only; see --help)`},
	} {
		_, stdout, err := parse(tc.args...)
		var ue cmdflag.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: err %v, want a UsageError", tc.args, err)
			continue
		}
		if err.Error() != tc.msg {
			t.Errorf("%q: err %q, want %q", tc.args, err, tc.msg)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q", tc.args, stdout)
		}
	}
}

func TestUsagef(t *testing.T) {
	base := errors.New("base")
	err := cmdflag.Usagef("bad --x: %w", base)
	var ue cmdflag.UsageError
	if !errors.As(err, &ue) || err.Error() != "bad --x: base" || !errors.Is(err, base) {
		t.Fatalf("Usagef: %v", err)
	}
}

// TestParseUnknownHint: a FlagSet's Unknown advice follows the error of a flag it does not
// define; without advice, the one defined flag nearest to it (a typo, a prefix) is named, and
// none when two are as near or none is.
func TestParseUnknownHint(t *testing.T) {
	const flags = "; the flags: waitroom t --help"
	for _, tc := range []struct{ arg, want string }{
		{"--admin-key=x", "flag provided but not defined: --admin-key (set WAITROOM_ADMIN_KEY)" + flags},
		{"--adr", "flag provided but not defined: --adr (did you mean --addr?)" + flags},
		{"--adrr=:80", "flag provided but not defined: --adrr (did you mean --addr?)" + flags},
		{"--address", "flag provided but not defined: --address (did you mean --addr?)" + flags},
		{"--max-con", "flag provided but not defined: --max-con (did you mean --max-conns?)" + flags},
		{"--max-conns-per-clinet", "flag provided but not defined: --max-conns-per-clinet (did you mean --max-conns-per-client?)" + flags},
		{"--drian", "flag provided but not defined: --drian (did you mean --drain?)" + flags},
		{"--max", "flag provided but not defined: --max" + flags}, // max-conns or max-conns-per-client
		{"--zzzzzz", "flag provided but not defined: --zzzzzz" + flags},
	} {
		fs := cmdflag.New("t", header)
		for _, name := range []string{"addr", "max-conns", "max-conns-per-client", "drain", "data"} {
			fs.String(name, "", "")
		}
		fs.Unknown = func(name string) string {
			if name == "admin-key" {
				return "set WAITROOM_ADMIN_KEY"
			}
			return ""
		}
		var stdout strings.Builder
		err := fs.Parse([]string{tc.arg}, &stdout)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err %v, want %q", tc.arg, err, tc.want)
		}
	}
}

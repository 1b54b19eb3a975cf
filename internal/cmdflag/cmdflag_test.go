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

func parse(args ...string) (n int, stdout, stderr string, err error) {
	fs := cmdflag.New("demo", header)
	fs.IntVar(&n, "n", 1, "a `number`")
	var out, errb bytes.Buffer
	err = fs.Parse(args, &out, &errb)
	return n, out.String(), errb.String(), err
}

func TestParse(t *testing.T) {
	n, stdout, stderr, err := parse("--n", "5")
	if err != nil || n != 5 || stdout != "" || stderr != "" {
		t.Fatalf("n %d err %v stdout %q stderr %q", n, err, stdout, stderr)
	}
}

func TestParseHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		_, stdout, stderr, err := parse(arg)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: err %v, want flag.ErrHelp", arg, err)
		}
		var ue cmdflag.UsageError
		if errors.As(err, &ue) {
			t.Errorf("%s: help is not a usage error", arg)
		}
		if !strings.HasPrefix(stdout, header) || !strings.Contains(stdout, "\n  --n number") || strings.Contains(stdout, "\n  -n") || stderr != "" {
			t.Errorf("%s: usage not on stdout: stdout %q stderr %q", arg, stdout, stderr)
		}
	}
}

func TestParseUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		msg        string
		usageOnErr bool // the usage text goes to stderr
	}{
		{[]string{"--nope"}, "flag provided but not defined: --nope", true},
		{[]string{"--n", "many"}, `invalid value "many" for flag --n`, true},
		{[]string{"-n"}, "flag needs an argument: --n", true},
		{[]string{"--n", "2", "extra", "more"}, `unexpected arguments ["extra" "more"] (flags only; see --help)`, false},
	} {
		_, stdout, stderr, err := parse(tc.args...)
		var ue cmdflag.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: err %v, want a UsageError", tc.args, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: err %q, want it to contain %q", tc.args, err, tc.msg)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q", tc.args, stdout)
		}
		if tc.usageOnErr && !strings.HasPrefix(stderr, err.Error()+"\n") {
			t.Errorf("%q: stderr does not start with the error: %q", tc.args, stderr)
		}
		if got := strings.Contains(stderr, header); got != tc.usageOnErr {
			t.Errorf("%q: usage on stderr %v, want %v: %q", tc.args, got, tc.usageOnErr, stderr)
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
// define, in the error and first on stderr; a flag it has no advice for gets none.
func TestParseUnknownHint(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--admin-key=x", "flag provided but not defined: --admin-key (set WAITROOM_ADMIN_KEY)"},
		{"--adress", "flag provided but not defined: --adress"},
	} {
		fs := cmdflag.New("t", header)
		fs.Unknown = func(name string) string {
			if name == "admin-key" {
				return "set WAITROOM_ADMIN_KEY"
			}
			return ""
		}
		var stdout, stderr strings.Builder
		err := fs.Parse([]string{tc.arg}, &stdout, &stderr)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err %v, want %q", tc.arg, err, tc.want)
		}
		if first, _, _ := strings.Cut(stderr.String(), "\n"); first != tc.want {
			t.Errorf("%s: stderr's first line %q, want %q", tc.arg, first, tc.want)
		}
	}
}

package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsageExitCodes: every command keeps the command line's exit codes: help 0 (on stdout), a
// bad command line 2 (with the reason on stderr). None of these cases reaches a server.
func TestUsageExitCodes(t *testing.T) {
	t.Setenv("WAITROOM_ADMIN_KEY", "")
	t.Setenv(configEnv, "")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a substring of stdout
		stderr string // a substring of stderr
	}{
		{[]string{"serve", "--nope"}, 2, "", "flag provided but not defined: --nope; the flags: waitroom serve --help"},
		{[]string{"serve", "--admin-key", "k"}, 2, "", "--admin-key (a secret: set WAITROOM_ADMIN_KEY in the environment"},
		{[]string{"serve", "--help"}, 0, "WAITROOM_CONFIG", ""},
		{[]string{"serve", "now"}, 2, "", `waitroom serve: unexpected arguments ["now"]`},
		{[]string{"serve", "--drain", "soon"}, 2, "", "waitroom serve: --drain: must be a duration"},
		{[]string{"serve", "--addr", "8080"}, 2, "", `waitroom serve: --addr: must be host:port or :port: write ":8080" for every address, or 127.0.0.1:8080 for this machine only (got "8080")`},
		{[]string{"serve", "--addr", "127.0.0.1:99999"}, 2, "", `--addr: port "99999" is not a number from 0 to 65535 as written plainly`},
		{[]string{"serve", "--addr", ":018080"}, 2, "", `--addr: port "018080" is not a number`},
		{[]string{"serve", "--addr", "127.0.0.1:+8080"}, 2, "", `--addr: port "+8080" is not a number`},
		{[]string{"serve", "--addr", "127.0.0.1:"}, 2, "", `--addr: the port is missing`},
		{[]string{"serve", "--metrics-addr", "localhost"}, 2, "", `--metrics-addr: must be host:port or :port`},
		{[]string{"serve", "--addr", ":18080", "--metrics-addr", "127.0.0.1:18080"}, 2, "", "--metrics-addr 127.0.0.1:18080 takes --addr's port (:18080)"},
		{[]string{"serve", "--config", "/nonexistent.yaml"}, 2, "", "/nonexistent.yaml"},
		{[]string{"reconcile", "--nope"}, 2, "", "flag provided but not defined: --nope"},
		{[]string{"reconcile", "-h"}, 0, "Usage: waitroom reconcile", ""},
		{[]string{"reconcile", "extra"}, 2, "", `waitroom reconcile: unexpected arguments ["extra"]`},
		{[]string{"reconcile"}, 2, "", "reconcile needs --redis and --database"},
		{[]string{"chaos", "--help"}, 0, "Usage: waitroom chaos", ""},
		{[]string{"chaos", "--nope"}, 2, "", "flag provided but not defined: --nope"},
		{[]string{"chaos", "extra"}, 2, "", `waitroom chaos: unexpected arguments ["extra"]`},
		{[]string{"chaos", "--only", "sigkill,nope"}, 2, "", `waitroom chaos: --only: unknown scenario "nope"`},
		{[]string{"chaos", "--redis-server", "/nonexistent", "--line-users", "-1"}, 2, "", "waitroom chaos: --line-users, --entrants and --fault-for must not be negative"},
		{[]string{"crowd", "--target", "http://127.0.0.1:1", "--event", "ev", "--push-silence", "-1s"}, 2, "", "push-silence must be at least 2ms"},
		{[]string{"verify-draw", "--help"}, 0, "Usage: waitroom verify-draw", ""},
		{[]string{"verify-draw", "--nope"}, 2, "", "flag provided but not defined: --nope"},
		{[]string{"verify-draw"}, 2, "", "--seed, --commitment and --n are required"},
		{[]string{"version", "now"}, 2, "", `waitroom version: unexpected arguments ["now"]`},
		{[]string{"version", "--help"}, 0, "Usage: waitroom version", ""},
		{[]string{"help", "version"}, 0, "Usage: waitroom version", ""},
		{[]string{"serve", "--adrr", ":8080"}, 2, "", "waitroom serve: flag provided but not defined: --adrr (did you mean --addr?); the flags: waitroom serve --help"},
		{[]string{"help", "serve"}, 0, "Usage: waitroom serve", ""},
		{[]string{"help", "bogus"}, 2, "", `unknown command "bogus"`},
		{[]string{"help", "serve", "crowd"}, 2, "", "waitroom help: unexpected arguments"},
		{[]string{"bench", "--help"}, 0, "Usage: waitroom bench", ""},
		{[]string{"bench", "-h"}, 0, "Usage: waitroom bench", ""},
		{[]string{"bench", "--nope"}, 2, "", "flag provided but not defined: --nope"},
		{[]string{"bench", "--rounds", "x"}, 2, "", `invalid value "x" for flag --rounds`},
		{[]string{"bench", "extra"}, 2, "", `waitroom bench: unexpected arguments ["extra"]`},
		{[]string{"bench", "--only", "nope"}, 2, "", `waitroom bench: unknown group "nope" in --only`},
		// An unreachable Redis: were the check missing, the run would fail at once, not measure.
		{[]string{"bench", "--redis", "redis://127.0.0.1:1", "--rounds", "0"}, 2, "", "waitroom bench: --rounds must be at least 1 (got 0)"},
		{[]string{"bench", "--redis", "redis://127.0.0.1:1", "--http-seconds", "-1"}, 2, "", "waitroom bench: --http-seconds must be at least 1"},
		{[]string{"crowd", "--help"}, 0, "Usage: waitroom crowd", ""},
		{[]string{"crowd", "-h"}, 0, "Usage: waitroom crowd", ""},
		{[]string{"crowd", "--nope"}, 2, "", "flag provided but not defined: --nope"},
		{[]string{"crowd", "--users", "x"}, 2, "", `invalid value "x" for flag --users`},
		{[]string{"crowd", "--target", "http://127.0.0.1:1", "--event", "ev", "extra"}, 2, "", `waitroom crowd: unexpected arguments ["extra"]`},
		{[]string{"crowd", "--event", "ev"}, 2, "", "waitroom crowd: at least one target is required"},
		{[]string{"crowd", "--target", "ftp://x", "--event", "ev"}, 2, "", "want an http:// or https:// base URL"},
		{[]string{"crowd", "--target", "http://127.0.0.1:1", "--event", "ev", "--poll-scale", "0"}, 2, "", "--poll-scale must be positive"},
		{[]string{"crowd", "--target", "http://127.0.0.1:1", "--event", "ev", "--named"}, 2, "", "named joins need the admin key"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%q: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout.String(), stderr.String())
		}
	}
}

// TestServeRefusesShortKeys: a short admin key is a usage error (exit 2) naming the rule.
func TestServeRefusesShortKeys(t *testing.T) {
	t.Setenv("WAITROOM_ADMIN_KEY", "too-short")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"serve", "--addr", "127.0.0.1:0"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "at least 16 bytes") {
		t.Fatalf("exit %d, want 2; stderr: %s", code, stderr.String())
	}
}

// TestEveryCommandHasHelp: each command the usage lists answers --help (and help <command>)
// with its own usage on stdout, exit 0; and a mistake in its flags is one line on stderr, not
// the whole usage.
func TestEveryCommandHasHelp(t *testing.T) {
	cmds := regexp.MustCompile(`(?m)^  waitroom ([a-z-]+)`).FindAllStringSubmatch(usage, -1)
	require.GreaterOrEqual(t, len(cmds), 9)
	for _, m := range cmds {
		cmd := m[1]
		if cmd == "help" {
			continue
		}
		for _, args := range [][]string{{cmd, "--help"}, {"help", cmd}} {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 0, Main(args, &stdout, &stderr), "%q: %s", args, stderr.String())
			require.Contains(t, stdout.String(), "Usage: waitroom "+cmd, "%q", args)
		}
		if cmd == "version" {
			continue
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main([]string{cmd, "--no-such-flag"}, &stdout, &stderr), cmd)
		require.Equal(t, "waitroom "+cmd+": flag provided but not defined: --no-such-flag; the flags: waitroom "+cmd+" --help\n", stderr.String())
	}
}

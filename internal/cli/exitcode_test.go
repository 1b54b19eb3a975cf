package cli

import (
	"bytes"
	"strings"
	"testing"
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
		{[]string{"serve", "--nope"}, 2, "", "flag provided but not defined: --nope"},
		{[]string{"serve", "--admin-key", "k"}, 2, "", "--admin-key (a secret: set WAITROOM_ADMIN_KEY in the environment"},
		{[]string{"serve", "--help"}, 0, "WAITROOM_CONFIG", ""},
		{[]string{"serve", "now"}, 2, "", `waitroom serve: unexpected arguments ["now"]`},
		{[]string{"serve", "--drain", "soon"}, 2, "", "waitroom serve: --drain: must be a duration"},
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

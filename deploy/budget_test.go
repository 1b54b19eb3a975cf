package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stop budget, the one rule every deployment file follows: after SIGTERM, waitroom serves
// for --drain (with /readyz failing), then the push hub and every listener get one
// --shutdown-grace together for the requests in flight (internal/app's Stop), then the loops
// stop (their steps are cancelled), an embedded line is saved and the database closes. A file
// gives the process, before its runtime kills it:
//
//	preStop sleep (Kubernetes only) + drain + shutdown grace + stopMargin
//
// the drain and the grace being the file's own settings, else serve's defaults as the binary
// prints them (`serve --help`). Each file states the sum, and the tests check it is exactly
// this one, so that a changed default cannot leave a file killing instances mid-stop.
const stopMargin = 5 * time.Second

// stopTimes are what one deployment gives: the preStop sleep before SIGTERM, then serve's
// drain and grace.
type stopTimes struct{ preStop, drain, grace time.Duration }

// budget is the time the deployment must give the process before it kills it.
func (s stopTimes) budget() time.Duration { return s.preStop + s.drain + s.grace + stopMargin }

// serveStopDefaults returns serve's --drain and --shutdown-grace defaults.
func serveStopDefaults(t *testing.T) stopTimes {
	t.Helper()
	d := serveDefaults(t)
	drain, err := time.ParseDuration(d["drain"])
	require.NoError(t, err, "--drain's default %q", d["drain"])
	grace, err := time.ParseDuration(d["shutdown-grace"])
	require.NoError(t, err, "--shutdown-grace's default %q", d["shutdown-grace"])
	require.Positive(t, drain)
	require.Positive(t, grace)
	return stopTimes{drain: drain, grace: grace}
}

var (
	helpOnce     sync.Once
	helpDefaults map[string]string
	helpErr      error
	helpOut      []byte
)

// helpFlag is one setting of `serve --help`: "  --name ARG, WAITROOM_…, key …" then its help,
// which ends with `(default "…")` when it has one.
var (
	helpFlag    = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)`)
	helpDefault = regexp.MustCompile(`\(default "([^"]*)"\)`)
)

// serveDefaults returns every flag's default (flag name → value) as `waitroom serve --help` of
// the binary the Dockerfile builds prints it: the service's own defaults (internal/app and
// internal/cli's settings table), which this module cannot import.
func serveDefaults(t *testing.T) map[string]string {
	t.Helper()
	bin := dockerBinary(t)
	helpOnce.Do(func() {
		// --help prints the usage and exits 0.
		helpOut, helpErr = exec.Command(bin, "serve", "--help").CombinedOutput()
		if helpErr != nil {
			return
		}
		helpDefaults = map[string]string{}
		text := string(helpOut)
		at := helpFlag.FindAllStringSubmatchIndex(text, -1)
		for i, m := range at {
			end := len(text)
			if i+1 < len(at) {
				end = at[i+1][0]
			}
			if d := helpDefault.FindAllStringSubmatch(text[m[0]:end], -1); d != nil {
				helpDefaults[text[m[2]:m[3]]] = d[len(d)-1][1]
			}
		}
	})
	require.NoError(t, helpErr, "serve --help: %s", helpOut)
	// The parse is real: settings every deployment relies on are found.
	for _, f := range []string{"addr", "drain", "shutdown-grace", "client-ip-header"} {
		require.Contains(t, helpDefaults, f, "serve --help gives no default of --%s:\n%s", f, helpOut)
	}
	require.True(t, strings.HasPrefix(helpDefaults["addr"], ":"), "--addr's default %q", helpDefaults["addr"])
	return helpDefaults
}

// envDuration is the duration a WAITROOM_… variable sets ("5s", "0" = none), or def when the
// variable is not set.
func envDuration(t *testing.T, env map[string]string, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := env[name]
	if !ok || v == "" {
		return def
	}
	if v == "0" {
		return 0
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s=%q", name, v)
	return d
}

func TestServeDefaultsAreRead(t *testing.T) {
	d := serveStopDefaults(t)
	t.Logf("serve's defaults: --drain %v, --shutdown-grace %v; budget without preStop %v", d.drain, d.grace, d.budget())
	require.Equal(t, "X-Forwarded-For", serveDefaults(t)["client-ip-header"])
}

// TestDockerRunStopTimeout: every `docker run` of the image in docs/deploy.md gives the
// container the stop's budget (--stop-timeout, in seconds): Docker's default of 10 s would kill
// it during its drain and grace.
func TestDockerRunStopTimeout(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	require.NoError(t, err)
	runs := regexp.MustCompile(`(?m)^\s+docker run .*$`).FindAllString(string(doc), -1)
	require.NotEmpty(t, runs, "docs/deploy.md runs the image")
	want := "--stop-timeout " + itoa(int(serveStopDefaults(t).budget()/time.Second)) + " "
	for _, run := range runs {
		require.Contains(t, run, want, "%s", strings.TrimSpace(run))
	}
}

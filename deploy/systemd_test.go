package deploy_test

import (
	"bufio"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const unitPath = "systemd/waitroom.service"

// unitSettings reads a unit file: section → key → values (a key may repeat).
func unitSettings(t *testing.T, src string) map[string]map[string][]string {
	t.Helper()
	s := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			s[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "not key=value: %q", line)
			require.NotEmpty(t, section, "%q before any section", line)
			s[section][k] = append(s[section][k], v)
		}
	}
	return s
}

func TestSystemdUnit(t *testing.T) {
	src, err := os.ReadFile(unitPath)
	require.NoError(t, err)
	u := unitSettings(t, string(src))
	svc := u["Service"]
	one := func(k string) string {
		require.Len(t, svc[k], 1, "one %s=", k)
		return svc[k][0]
	}
	// The embedded deployment: the data file in the state directory, the working directory.
	state := "/var/lib/" + one("StateDirectory")
	require.Equal(t, state, one("WorkingDirectory"))
	exec := strings.Fields(one("ExecStart"))
	require.Equal(t, "/usr/local/bin/waitroom", exec[0])
	require.Equal(t, []string{"serve", "--data", state + "/waitroom.db"}, exec[1:])
	require.Equal(t, "yes", one("DynamicUser"))
	require.Equal(t, "on-failure", one("Restart"))
	// The stop's budget (budget_test.go): the unit sets neither --drain nor --shutdown-grace,
	// so serve's defaults.
	stopSec, err := time.ParseDuration(one("TimeoutStopSec"))
	require.NoError(t, err)
	require.Equal(t, serveStopDefaults(t).budget(), stopSec, "TimeoutStopSec")
	require.Equal(t, "SIGTERM", one("KillSignal"))
	require.NotContains(t, exec, "--drain")
	require.NotContains(t, exec, "--shutdown-grace")
	require.Equal(t, "-/etc/waitroom/waitroom.env", one("EnvironmentFile"))
	require.Equal(t, "strict", one("ProtectSystem"))
	require.Equal(t, "yes", one("NoNewPrivileges"))
	require.Equal(t, []string{"multi-user.target"}, u["Install"]["WantedBy"])

	// The example environment file names only variables waitroom reads.
	env, err := os.ReadFile("systemd/waitroom.env.example")
	require.NoError(t, err)
	known := waitroomEnv(t)
	n := 0
	for _, line := range strings.Split(string(env), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "#")
		if k, _, ok := strings.Cut(line, "="); ok && envName.MatchString(k) {
			require.True(t, known[k], "waitroom.env.example names %s, which waitroom does not read", k)
			n++
		}
	}
	require.GreaterOrEqual(t, n, 4)

	// Who a visitor is: direct by default (the unit trusts no proxy); the example trusts only
	// this host's proxy, commented out, with the header that proxy is told to overwrite.
	require.NotContains(t, string(src), "WAITROOM_TRUSTED_PROXIES=")
	require.NotContains(t, exec, "--trusted-proxies")
	examples := map[string]string{}
	for _, line := range strings.Split(string(env), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			require.False(t, strings.HasPrefix(k, "WAITROOM_TRUSTED_PROXIES") || strings.HasPrefix(k, "WAITROOM_CLIENT_IP_HEADER"),
				"the example sets %s: the embedded deployment is direct by default", k)
			examples[strings.TrimPrefix(k, "#")] = v
		}
	}
	require.Contains(t, examples, "WAITROOM_TRUSTED_PROXIES")
	for _, p := range strings.Split(examples["WAITROOM_TRUSTED_PROXIES"], ",") {
		a, err := netip.ParseAddr(p)
		require.NoError(t, err)
		require.True(t, a.IsLoopback(), "the example trusts %s: a proxy on this host only", a)
	}
	require.Equal(t, "X-Forwarded-For", examples["WAITROOM_CLIENT_IP_HEADER"])
	require.Contains(t, string(env), "proxy_set_header X-Forwarded-For $remote_addr;")
}

// TestSystemdAnalyze runs `systemd-analyze verify` (every key known and well-formed, the
// ExecStart binary executable) and `systemd-analyze security --offline` (exposure at most 2.0)
// on a copy of the unit whose ExecStart runs the binary the Dockerfile's build line makes.
// Neither needs systemd as PID 1.
func TestSystemdAnalyze(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not found (Debian package systemd)")
		}
		t.Skip("systemd-analyze not found (Debian package systemd); TestSystemdUnit still checks the unit's settings")
	}
	src, err := os.ReadFile(unitPath)
	require.NoError(t, err)
	bin := dockerBinary(t)
	unit := strings.Replace(string(src), "ExecStart=/usr/local/bin/waitroom ", "ExecStart="+bin+" ", 1)
	require.NotEqual(t, string(src), unit)
	path := filepath.Join(t.TempDir(), "waitroom.service")
	require.NoError(t, os.WriteFile(path, []byte(unit), 0o644))

	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	// verify exits 0 on an unknown or malformed key, but says so.
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify")

	out, err = exec.Command(analyze, "security", "--offline=true", "--threshold=20", "--no-pager", path).CombinedOutput()
	require.NoError(t, err, "systemd-analyze security: exposure above 2.0\n%s", out)
	t.Logf("%s", out[strings.LastIndex(string(out[:len(out)-1]), "\n")+1:])

	// The check is real: a misspelt key is reported.
	bad := filepath.Join(t.TempDir(), "waitroom.service")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(unit, "Restart=", "Restat=", 1)), 0o644))
	out, _ = exec.Command(analyze, "verify", bad).CombinedOutput()
	require.Contains(t, string(out), "Unknown key 'Restat'")
}

package cli

import (
	"bytes"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// env is a getenv over a map: tests give parseServe its environment without touching the
// process's.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeConfig writes a config file into a fresh directory and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "waitroom.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// samples is a valid value, not the default, of every setting (by env name). A setting added
// to the table without one here fails TestServeSettingsEverySource.
var samples = map[string]string{
	"WAITROOM_ADDR":                    "127.0.0.1:9999",
	"WAITROOM_DATA":                    "other.db",
	"WAITROOM_REDIS_URL":               "redis://127.0.0.1:6380",
	"WAITROOM_DATABASE_URL":            "postgres://u@h/db",
	"WAITROOM_REDIS_PREFIX":            "other:",
	"WAITROOM_GATE":                    "gate.yaml",
	"WAITROOM_LOG_FORMAT":              "json",
	"WAITROOM_LOG_LEVEL":               "debug",
	"WAITROOM_ACCESS_LOG":              "false",
	"WAITROOM_ACCESS_LOG_SAMPLE":       "0.5",
	"WAITROOM_TRUSTED_PROXIES":         "10.0.0.0/8,::1",
	"WAITROOM_CLIENT_IP_HEADER":        "Forwarded",
	"WAITROOM_ALLOWED_ORIGINS":         "https://shop.example",
	"WAITROOM_CAPTCHA_SITEVERIFY_URLS": "https://captcha.example/siteverify,http://10.0.0.5:8080/siteverify",
	"WAITROOM_METRICS_ADDR":            "127.0.0.1:9090",
	"WAITROOM_PPROF":                   "true",
	"WAITROOM_IDENTITY_ISSUER":         "https://shop.example",
	"WAITROOM_IDENTITY_AUDIENCE":       "waitroom",
	"WAITROOM_STORE_TIMEOUT":           "750ms",
	"WAITROOM_DRAIN":                   "1s",
	"WAITROOM_SHUTDOWN_GRACE":          "3s",
	"WAITROOM_TOKEN_TTL":               "2m",
	"WAITROOM_HISTORY_INTERVAL":        "10s",
	"WAITROOM_MAX_CONNS":               "5000",
	"WAITROOM_DATABASE_MAX_CONNS":      "6",
	"WAITROOM_HEALTH_URLS":             "https://shop.example/health",
	"WAITROOM_MAX_CONNS_PER_CLIENT":    "50",
	"WAITROOM_BUSY_IDLE_TIMEOUT":       "2s",
	"WAITROOM_IDLE_TIMEOUT":            "3m",
	"WAITROOM_ADMIN_KEY":               "admin-key-0123456789",
	"WAITROOM_TOKEN_KEY":               "token-key-0123456789",
	"WAITROOM_IDENTITY_KEY":            "identity-key-0123456789",
	"WAITROOM_IDENTITY_PUBLIC_KEY":     "MCowBQYDK2VwAyEA",
}

// serveWith parses serve's settings from args and environment m; the scale-out checks are
// kept quiet by keys and a database whenever Redis is set.
func serveWith(t *testing.T, args []string, m map[string]string) (serveConfig, error) {
	t.Helper()
	return parseServe(args, io.Discard, io.Discard, env(m))
}

// TestServeHelpIsTheTable: `serve --help` names exactly the environment variables serve
// reads (recorded as parseServe asks for them), exactly the flags its flag set defines, and
// every config-file key it names is accepted in a file. Help and reading cannot drift apart.
func TestServeHelpIsTheTable(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, Main([]string{"serve", "--help"}, &out, &errb), errb.String())
	help := out.String()

	asked := map[string]bool{}
	_, err := parseServe(nil, io.Discard, io.Discard, func(k string) string { asked[k] = true; return "" })
	require.NoError(t, err)
	inHelp := map[string]bool{}
	for _, m := range regexp.MustCompile(`WAITROOM_[A-Z_]+`).FindAllString(help, -1) {
		inHelp[m] = true
	}
	require.Equal(t, asked, inHelp, "variables read (left) and named by --help (right)")
	require.GreaterOrEqual(t, len(asked), 20)

	fs, _ := serveFlags()
	var defined []string
	fs.VisitAll(func(f *flag.Flag) { defined = append(defined, f.Name) })
	var named []string
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+)`).FindAllStringSubmatch(help, -1) {
		named = append(named, m[1])
	}
	slices.Sort(defined)
	slices.Sort(named)
	require.Equal(t, defined, named, "flags defined (left) and named by --help (right)")

	keys := regexp.MustCompile(`, key ([a-z_]+)\n`).FindAllStringSubmatch(help, -1)
	require.Len(t, keys, len(named)-1, "one key per flag but --config")
	for _, k := range keys {
		_, err := readConfigFile(writeConfig(t, k[1]+":\n"))
		require.NoError(t, err, "key %s named by --help", k[1])
	}
}

// TestServeSettingsEverySource: each setting, given alone by its flag, its environment
// variable or its config-file key, changes serve's config, and the same way from each source
// (secrets from the environment only: their file key is refused, naming the variable).
func TestServeSettingsEverySource(t *testing.T) {
	defaults, err := serveWith(t, nil, nil)
	require.NoError(t, err)
	for _, s := range serveSettings {
		sample, ok := samples[s.env]
		require.True(t, ok, "no sample value for %s", s.env)
		t.Run(s.env, func(t *testing.T) {
			// Redis and a database need each other and the keys: give the others too.
			base := map[string]string{}
			if s.env == "WAITROOM_REDIS_URL" || s.env == "WAITROOM_DATABASE_URL" {
				for _, k := range []string{"WAITROOM_REDIS_URL", "WAITROOM_DATABASE_URL", "WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY"} {
					if k != s.env {
						base[k] = samples[k]
					}
				}
			}
			if s.env == "WAITROOM_PPROF" { // the profiles need a listener of their own
				base["WAITROOM_METRICS_ADDR"] = samples["WAITROOM_METRICS_ADDR"]
			}
			withBase := func(extra map[string]string) map[string]string {
				m := map[string]string{}
				for k, v := range base {
					m[k] = v
				}
				for k, v := range extra {
					m[k] = v
				}
				return m
			}
			// What the row's own parser makes of the values, without and with this one.
			without := defaults
			for k, v := range base {
				i := slices.IndexFunc(serveSettings, func(r setting) bool { return r.env == k })
				require.NoError(t, serveSettings[i].set(&without, v))
			}
			want := without
			require.NoError(t, s.set(&want, sample))
			require.False(t, reflect.DeepEqual(want, without), "the sample of %s is its default", s.env)

			fromEnv, err := serveWith(t, nil, withBase(map[string]string{s.env: sample}))
			require.NoError(t, err)
			require.Equal(t, want, fromEnv, "%s=%s", s.env, sample)
			if s.flag == "" {
				key := strings.ToLower(strings.TrimPrefix(s.env, "WAITROOM_"))
				_, err := serveWith(t, nil, withBase(map[string]string{configEnv: writeConfig(t, key+": "+sample+"\n")}))
				require.ErrorContains(t, err, "is a secret: set "+s.env)
				return
			}
			fromFlag, err := serveWith(t, []string{"--" + s.flag + "=" + sample}, withBase(nil))
			require.NoError(t, err)
			require.Equal(t, fromEnv, fromFlag, "--%s", s.flag)
			fromFile, err := serveWith(t, nil, withBase(map[string]string{configEnv: writeConfig(t, s.key()+": '"+sample+"'\n")}))
			require.NoError(t, err)
			require.Equal(t, fromEnv, fromFile, "config key %s", s.key())
		})
	}
}

// TestServeSettingsPrecedence: flag > environment > config file > default, for a value and
// for the config file's own name (--config over WAITROOM_CONFIG).
func TestServeSettingsPrecedence(t *testing.T) {
	file := writeConfig(t, "addr: 127.0.0.1:1001\nlog_level: warn\n")
	other := writeConfig(t, "addr: 127.0.0.1:1004\n")
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, ":8080"},
		{"file", nil, map[string]string{configEnv: file}, "127.0.0.1:1001"},
		{"env over file", nil, map[string]string{configEnv: file, "WAITROOM_ADDR": "127.0.0.1:1002"}, "127.0.0.1:1002"},
		{"flag over env and file", []string{"--addr", "127.0.0.1:1003"},
			map[string]string{configEnv: file, "WAITROOM_ADDR": "127.0.0.1:1002"}, "127.0.0.1:1003"},
		{"empty env is unset", nil, map[string]string{configEnv: file, "WAITROOM_ADDR": ""}, "127.0.0.1:1001"},
		{"--config over WAITROOM_CONFIG", []string{"--config", other}, map[string]string{configEnv: file}, "127.0.0.1:1004"},
		{"--config alone", []string{"--config=" + other}, nil, "127.0.0.1:1004"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := serveWith(t, c.args, c.env)
			require.NoError(t, err)
			require.Equal(t, c.want, got.addr)
		})
	}
	// Settings the winning source does not give come from the next one down.
	got, err := serveWith(t, []string{"--addr", ":1"}, map[string]string{configEnv: file})
	require.NoError(t, err)
	require.Equal(t, "WARN", got.logLevel.String())
	// A list in the file is the comma-separated value.
	got, err = serveWith(t, []string{"--config", writeConfig(t, "trusted_proxies:\n  - 10.0.0.0/8\n  - ::1\n")}, nil)
	require.NoError(t, err)
	require.Equal(t, "[10.0.0.0/8 ::1/128]", fmtPrefixes(got))
	// --drain 0 is no drain (app.Config's negative).
	got, err = serveWith(t, []string{"--config", writeConfig(t, "drain: 0\n")}, nil)
	require.NoError(t, err)
	require.Negative(t, got.drain)
}

func fmtPrefixes(c serveConfig) string {
	s := make([]string, len(c.trustedProxies))
	for i, p := range c.trustedProxies {
		s[i] = p.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestServeConfigMistakes: a config file with an unknown key, a bad value, a secret, a
// mapping where a value belongs, or that cannot be read, and a bad value from the environment
// or a flag: serve exits 2 naming the file, line and key, or the variable or flag.
func TestServeConfigMistakes(t *testing.T) {
	for _, c := range []struct {
		name string
		file string // "" = no config file
		env  map[string]string
		args []string
		want []string
	}{
		{"unknown key", "addr: :1\nadress: :2\n", nil, nil, []string{"line 2", `unknown key "adress"`, "known: addr, data"}},
		{"flag name as key", "redis-prefix: x\n", nil, nil, []string{`unknown key "redis-prefix"`, "redis_prefix"}},
		{"bad duration", "drain: 5\n", nil, nil, []string{"line 1: drain", "must be a duration", `"5"`}},
		{"negative duration", "store_timeout: -1s\n", nil, nil, []string{"store_timeout", "positive duration"}},
		{"bad boolean", "access_log: sometimes\n", nil, nil, []string{"line 1: access_log", "true or false"}},
		{"bad log level", "\n\nlog_level: loud\n", nil, nil, []string{"line 3: log_level", "debug, info, warn or error"}},
		{"bad cidr in a list", "trusted_proxies: [10.0.0.0/8, nope]\n", nil, nil, []string{"trusted_proxies", "nope"}},
		{"list for a single value", "addr: [a, b]\n", nil, nil, []string{"line 1: addr: want a single value"}},
		{"mapping value", "addr:\n  host: x\n", nil, nil, []string{"addr: want a single value"}},
		{"secret in the file", "admin_key: admin-key-0123456789\n", nil, nil, []string{`"admin_key" is a secret: set WAITROOM_ADMIN_KEY`}},
		{"not a mapping", "- addr\n", nil, nil, []string{"want a mapping of settings"}},
		{"twice", "addr: :1\naddr: :2\n", nil, nil, []string{"addr"}},
		{"not yaml", "addr: [\n", nil, nil, []string{"waitroom.yaml"}},
		{"bad env value", "", map[string]string{"WAITROOM_ACCESS_LOG": "yes please"}, nil, []string{"WAITROOM_ACCESS_LOG: must be true or false"}},
		{"bad flag value", "", nil, []string{"--token-ttl", "0s"}, []string{"--token-ttl: must be a positive duration"}},
		{"missing file", "", map[string]string{configEnv: "/nonexistent/waitroom.yaml"}, nil, []string{"/nonexistent/waitroom.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range c.env {
				m[k] = v
			}
			if c.file != "" {
				m[configEnv] = writeConfig(t, c.file)
			}
			_, err := serveWith(t, c.args, m)
			require.Error(t, err)
			require.ErrorAs(t, err, new(usageError))
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	// Through Main: exit 2, the key named on stderr.
	p := writeConfig(t, "adress: :1\n")
	var out, errb bytes.Buffer
	require.Equal(t, 2, Main([]string{"serve", "--config", p}, &out, &errb))
	require.Contains(t, errb.String(), `waitroom serve: `+p+` line 1: unknown key "adress"`)
}

// TestServeConfigEmptyFile: a file of comments only, or keys without values, sets nothing.
func TestServeConfigEmptyFile(t *testing.T) {
	defaults, err := serveWith(t, nil, nil)
	require.NoError(t, err)
	for _, content := range []string{"", "# nothing yet\n", "addr:\nredis:\n", "{}\n"} {
		got, err := serveWith(t, []string{"--config", writeConfig(t, content)}, nil)
		require.NoError(t, err, "%q", content)
		require.Equal(t, defaults, got, "%q", content)
	}
}

// TestDatabaseMaxConnsRefusesTooFew: one connection cannot hold both pools (requests and the
// line's numbers); serve refuses it, and a word, by name, before opening anything.
func TestDatabaseMaxConnsRefusesTooFew(t *testing.T) {
	for _, v := range []string{"1", "0", "-3", "six"} {
		_, err := serveWith(t, []string{"--database-max-conns", v}, nil)
		require.ErrorContains(t, err, "at least 2", "--database-max-conns %s", v)
		require.ErrorContains(t, err, "database-max-conns", "--database-max-conns %s", v)
	}
}

// TestExampleConfigFile: examples/waitroom.yaml parses, names every key (set or commented
// out as "# key:"), and every key it sets has the default the help states: the example cannot
// go stale.
func TestExampleConfigFile(t *testing.T) {
	const path = "../../examples/waitroom.yaml"
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	vals, err := readConfigFile(path)
	require.NoError(t, err)
	for _, s := range serveSettings {
		if s.flag == "" {
			require.NotRegexp(t, `(?mi)^#? *`+strings.TrimPrefix(s.env, "WAITROOM_")+`:`, string(src), "a secret in the example")
			continue
		}
		require.Regexp(t, `(?m)^(# )?`+s.key()+`:`, string(src), "example names %s", s.key())
		if v, ok := vals[s.key()]; ok {
			require.Equal(t, s.def, v.text, "example's %s is not the default", s.key())
		}
	}
	_, err = serveWith(t, []string{"--config", path}, nil)
	require.NoError(t, err)
}

// TestReconcileReadsServesConfigFile: reconcile takes serve's settings of the same names from
// the same config file, ignores serve's other keys, and still refuses unknown ones.
func TestReconcileReadsServesConfigFile(t *testing.T) {
	t.Setenv("WAITROOM_ADMIN_KEY", "")
	t.Setenv("WAITROOM_TOKEN_KEY", "")
	t.Setenv("WAITROOM_REDIS_URL", "")
	t.Setenv("WAITROOM_DATABASE_URL", "")
	t.Setenv(configEnv, "")
	var out, errb bytes.Buffer
	p := writeConfig(t, "addr: :1\nredis: redis://127.0.0.1:1\ndatabase: postgres://x@127.0.0.1:1/y\n")
	require.Equal(t, 2, Main([]string{"reconcile", "--config", p}, &out, &errb))
	require.Contains(t, errb.String(), "set WAITROOM_ADMIN_KEY and WAITROOM_TOKEN_KEY", "got past the file to the keys")
	errb.Reset()
	p = writeConfig(t, "redis: redis://127.0.0.1:1\nredis_url: x\n")
	require.Equal(t, 2, Main([]string{"reconcile", "--config", p}, &out, &errb))
	require.Contains(t, errb.String(), `unknown key "redis_url"`)
}

// TestOtherEnvIsComplete: every WAITROOM_ variable the repository names (its Go sources, tests
// included, its scripts, Makefile and CI) is serve's, --config's or in otherEnv, and every name
// in otherEnv is used: serve warns of the rest as misspelt (unknownEnv).
func TestOtherEnvIsComplete(t *testing.T) {
	// A name on its own, not the end of another (PHP's HTTP_X_WAITROOM_TICKET).
	name := regexp.MustCompile(`(?:^|[^A-Za-z0-9_])(WAITROOM_[A-Z0-9_]*[A-Z0-9])`)
	used := map[string]string{} // name -> a file naming it
	root := filepath.Join("..", "..")
	for _, dir := range []string{"internal", "cmd", "scripts", ".ci"} {
		require.NoError(t, filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".sh") || filepath.Dir(path) == filepath.Join(root, ".ci")) {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range name.FindAllSubmatch(b, -1) {
				used[string(m[1])] = path
			}
			return err
		}))
	}
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	for _, m := range name.FindAllSubmatch(b, -1) {
		used[string(m[1])] = "Makefile"
	}
	misspelt := "WAITROOM_" + "SHUTDOWN_TIMEOUT" // TestLowOpenFileLimitWarns's
	delete(used, misspelt)
	require.Contains(t, used, "WAITROOM_ADMIN_KEY", "the scan found nothing")
	for n, file := range used {
		require.Empty(t, unknownEnv([]string{n + "=x"}), "%s (%s) is neither serve's nor in otherEnv", n, file)
	}
	for _, n := range otherEnv {
		require.Contains(t, used, n, "otherEnv names %s, which nothing uses", n)
	}
	other := "WAITROOM_" + "X" // no value: counted all the same
	require.Equal(t, []string{misspelt, other}, unknownEnv([]string{
		misspelt + "=60s", "WAITROOM_ADDR=:1", "PATH=/bin", other, "WAITROOM_CONFIG=x.yaml", misspelt + "=1", "WAITROOM_CROWD_CHILD=1"}))
}

// TestSameListen: two listen addresses take the same port when one listens on every address
// of the other's family, or both on the same host; port 0 never clashes.
func TestSameListen(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{":8080", "127.0.0.1:8080", true},
		{"[::]:8080", "127.0.0.1:8080", true},
		{"0.0.0.0:8080", "127.0.0.1:8080", true},
		{"0.0.0.0:8080", "[::1]:8080", false},
		{"0.0.0.0:8080", "localhost:8080", true},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"LOCALHOST:8080", "localhost:8080", true},
		{"127.0.0.1:8080", "127.0.0.2:8080", false},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{":0", "127.0.0.1:0", false},
	} {
		require.Equal(t, c.same, sameListen(c.a, c.b), "%s, %s", c.a, c.b)
		require.Equal(t, c.same, sameListen(c.b, c.a), "%s, %s", c.b, c.a)
	}
}

package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/origin"
	"github.com/waitroom/waitroom/internal/recorder"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/token"
)

// serveConfig is everything serve (and reconcile, a part of it) reads from flags, the
// environment and the config file: one field per row of [serveSettings].
type serveConfig struct {
	addr, data, redisURL, databaseURL, prefix, logFormat, gate    string
	logLevel                                                      slog.Level
	accessLog                                                     bool
	accessLogSample                                               float64
	pprof                                                         bool
	adminKey, tokenKey, identityKey, identityPublic               string
	metricsAddr, allowedOrigins, identityIssuer, identityAudience string
	captchaSiteverifyURLs                                         []string
	healthURLs                                                    autoadmit.HealthURLs
	trustedProxies                                                []netip.Prefix
	clientIPHeader                                                clientaddr.Header
	storeTimeout, drain, shutdownGrace, tokenTTL, historyInterval time.Duration
	maxConns, maxConnsPerClient, databaseMaxConns                 int
	busyIdleTimeout, idleTimeout                                  time.Duration
}

// A setting is one value serve reads. Its flag, its environment variable and its config-file
// key are all read through this row, in the order flag > environment > config file > default,
// and `serve --help` is written from the same rows: a name cannot be read without being in the
// help, nor be in the help without being read (TestServeHelpIsTheTable).
type setting struct {
	// flag is the flag name without dashes ("store-timeout"); its config-file key is the same
	// with underscores ("store_timeout"). "" = a secret, read from the environment only (a
	// config file is often readable by more people than the process's environment).
	flag string
	// env is the environment variable; an empty value counts as unset.
	env string
	// def is the default as text ("" = none).
	def string
	// arg names the value in --help ("DURATION"); "" for a boolean.
	arg string
	// help is the one-line description.
	help string
	// list: a config file may give the value as a YAML list (joined with commas).
	list bool
	// set parses the value into c; its error names what is wrong with the value, the caller
	// prefixes where the value came from.
	set func(c *serveConfig, v string) error
}

// key is the setting's config-file key: the flag name with underscores.
func (s setting) key() string { return strings.ReplaceAll(s.flag, "-", "_") }

func text(field func(*serveConfig) *string) func(*serveConfig, string) error {
	return func(c *serveConfig, v string) error { *field(c) = v; return nil }
}

// listenAddr takes a TCP listen address: host:port or :port, the port a number up to 65535 (0:
// any free one) or a service name. A bare port ("8080") is the likeliest slip, named as such.
func listenAddr(field func(*serveConfig) *string) func(*serveConfig, string) error {
	return func(c *serveConfig, v string) error {
		if err := checkListenAddr(v); err != nil {
			return err
		}
		*field(c) = v
		return nil
	}
}

func checkListenAddr(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		if _, err := strconv.Atoi(v); err == nil {
			return fmt.Errorf("must be host:port or :port: write %q for every address, or 127.0.0.1:%s for this machine only (got %q)", ":"+v, v, v)
		}
		return fmt.Errorf("must be host:port or :port, e.g. :8080 or 127.0.0.1:8080 (got %q)", v)
	}
	if port == "" {
		return fmt.Errorf("the port is missing: host:port or :port, :0 for any free one (got %q)", v)
	}
	if n, err := strconv.Atoi(port); err == nil || port[0] == '+' || port[0] == '-' {
		if err != nil || n < 0 || n > 65535 || strconv.Itoa(n) != port {
			return fmt.Errorf("port %q is not a number from 0 to 65535 as written plainly (got %q)", port, v)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is neither a number nor a known service (got %q)", port, v)
	}
	return nil
}

// sameListen reports whether listen addresses a and b (both checked) would take the same port:
// the same port, not 0, and the same host, or one of them every address of the other's
// family: "" and "::" (dual-stack) every address, "0.0.0.0" every IPv4 one. (A name and an
// address of it, localhost and 127.0.0.1, are not told apart here: the second listen fails.)
func sameListen(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	covers := func(h, o string) bool { // h's listen takes o's address too
		ip, err := netip.ParseAddr(h)
		switch {
		case h == "" || (err == nil && ip == netip.IPv6Unspecified()):
			return true
		case err == nil && ip == netip.IPv4Unspecified():
			oip, err := netip.ParseAddr(o)
			return err != nil || oip.Unmap().Is4()
		}
		return false
	}
	return covers(ha, hb) || covers(hb, ha) || strings.EqualFold(ha, hb)
}

// duration parses a Go duration; zero is allowed only when zeroOK.
func duration(field func(*serveConfig) *time.Duration, zeroOK bool) func(*serveConfig, string) error {
	return func(c *serveConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || (d == 0 && !zeroOK) {
			if zeroOK {
				return fmt.Errorf("must be a duration such as 5s, or 0 (got %q)", v)
			}
			return fmt.Errorf("must be a positive duration such as 2s (got %q)", v)
		}
		*field(c) = d
		return nil
	}
}

// positive parses a whole number of at least 1.
func positive(field func(*serveConfig) *int) func(*serveConfig, string) error {
	return func(c *serveConfig, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("must be a whole number of at least 1 (got %q)", v)
		}
		*field(c) = n
		return nil
	}
}

// configFlag and configEnv name the config file; they are not keys of it.
const (
	configFlag = "config"
	configEnv  = "WAITROOM_CONFIG"
)

// serveSettings is the table of serve's settings, in the order of --help.
var serveSettings = []setting{
	{flag: "addr", env: "WAITROOM_ADDR", def: ":8080", arg: "ADDR", help: "listen address (host:port, or :port for every address)",
		set: listenAddr(func(c *serveConfig) *string { return &c.addr })},
	{flag: "data", env: "WAITROOM_DATA", def: "waitroom.db", arg: "FILE", help: "SQLite file of the embedded deployment",
		set: text(func(c *serveConfig) *string { return &c.data })},
	{flag: "redis", env: "WAITROOM_REDIS_URL", arg: "URL",
		help: "Redis URL: redis://host:port (or host:port); a Redis Cluster: a comma-separated node list, or redis+cluster://host:port,...",
		set:  text(func(c *serveConfig) *string { return &c.redisURL })},
	{flag: "database", env: "WAITROOM_DATABASE_URL", arg: "URL", help: "PostgreSQL URL (postgres://...); needs --redis",
		set: text(func(c *serveConfig) *string { return &c.databaseURL })},
	{flag: "database-max-conns", env: "WAITROOM_DATABASE_MAX_CONNS", def: strconv.Itoa(sqlstore.DefaultPostgresConns), arg: "N",
		help: "most connections this instance holds open to PostgreSQL, both pools together (a sixth, 1 to 4, for the line's numbers; the rest for requests): instances × N must stay under PostgreSQL's max_connections (docs/deploy.md)",
		set: func(c *serveConfig, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < sqlstore.MinPostgresConns {
				return fmt.Errorf("must be a whole number of at least %d (got %q)", sqlstore.MinPostgresConns, v)
			}
			c.databaseMaxConns = n
			return nil
		}},
	{flag: "redis-prefix", env: "WAITROOM_REDIS_PREFIX", def: "wr:", arg: "PREFIX", help: "prefix of every Redis key",
		set: text(func(c *serveConfig) *string { return &c.prefix })},
	{flag: "gate", env: "WAITROOM_GATE", arg: "FILE", help: "gate file (YAML or JSON): protect an existing site, see docs/gate.md",
		set: text(func(c *serveConfig) *string { return &c.gate })},
	{flag: "log-format", env: "WAITROOM_LOG_FORMAT", def: "text", arg: "FORMAT", help: "log format: text or json",
		set: func(c *serveConfig, v string) error {
			if v != "text" && v != "json" {
				return fmt.Errorf("must be text or json (got %q)", v)
			}
			c.logFormat = v
			return nil
		}},
	{flag: "log-level", env: "WAITROOM_LOG_LEVEL", def: "info", arg: "LEVEL", help: "least level logged: debug, info, warn or error",
		set: func(c *serveConfig, v string) error {
			if err := c.logLevel.UnmarshalText([]byte(v)); err != nil {
				return fmt.Errorf("must be debug, info, warn or error (got %q)", v)
			}
			return nil
		}},
	{flag: "access-log", env: "WAITROOM_ACCESS_LOG", def: "true",
		help: "log HTTP requests at level info, one line each (request id, route, status, duration): every 5xx and a sample of the rest (--access-log-sample)",
		set: func(c *serveConfig, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("must be true or false (got %q)", v)
			}
			c.accessLog = b
			return nil
		}},
	{flag: "access-log-sample", env: "WAITROOM_ACCESS_LOG_SAMPLE", def: "0.01", arg: "FRACTION",
		help: "the fraction of requests the access log writes (0 to 1; every 5xx is written): a flash crowd's every request is gigabytes",
		set: func(c *serveConfig, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 || f != f {
				return fmt.Errorf("must be a number from 0 to 1 (got %q)", v)
			}
			c.accessLogSample = f
			return nil
		}},
	{flag: "trusted-proxies", env: "WAITROOM_TRUSTED_PROXIES", arg: "CIDRS", list: true,
		help: "comma-separated CIDRs of the proxies in front (load balancers, ingress) whose --client-ip-header names the client, on every listener (default none: the connection's address)",
		set: func(c *serveConfig, v string) (err error) {
			c.trustedProxies, err = clientaddr.ParseCIDRs(v)
			return err
		}},
	{flag: "client-ip-header", env: "WAITROOM_CLIENT_IP_HEADER", def: "X-Forwarded-For", arg: "HEADER",
		help: "the header the trusted proxies write: X-Forwarded-For or Forwarded (RFC 7239); the other is never believed",
		set: func(c *serveConfig, v string) (err error) {
			c.clientIPHeader, err = clientaddr.ParseHeader(v)
			return err
		}},
	{flag: "allowed-origins", env: "WAITROOM_ALLOWED_ORIGINS", arg: "ORIGINS", list: true,
		help: "comma-separated origins (https://shop.example) whose pages may join and open push connections; * = any (default: the same origin only)",
		set: func(c *serveConfig, v string) error {
			if _, err := origin.Parse(v); err != nil {
				return err
			}
			c.allowedOrigins = v
			return nil
		}},
	{flag: "captcha-siteverify-urls", env: "WAITROOM_CAPTCHA_SITEVERIFY_URLS", def: strings.Join(captcha.DefaultSiteverifyURLs, ","), arg: "URLS", list: true,
		help: "comma-separated verification URLs events' external challenges may name, the only ones the server sends captcha secrets to (compared exactly; none = no external challenges)",
		set: func(c *serveConfig, v string) (err error) {
			c.captchaSiteverifyURLs, err = captcha.ParseAllowList(v)
			return err
		}},
	{flag: "health-urls", env: "WAITROOM_HEALTH_URLS", arg: "URLS", list: true,
		help: "comma-separated URL prefixes an event's auto.health_url may start with (scheme and host:port exactly, the path on a / boundary), the only URLs the instances poll for admission mode auto (default none: health comes from the gate and POST /v1/events/{id}/health)",
		set: func(c *serveConfig, v string) (err error) {
			c.healthURLs, err = autoadmit.ParseHealthURLs(v)
			return err
		}},
	{flag: "metrics-addr", env: "WAITROOM_METRICS_ADDR", arg: "ADDR",
		help: "serve /metrics without a key on this address of its own (default: /metrics on --addr needs the admin key)",
		set:  listenAddr(func(c *serveConfig) *string { return &c.metricsAddr })},
	{flag: "pprof", env: "WAITROOM_PPROF", def: "false",
		help: "serve Go's profiles (/debug/pprof/) on --metrics-addr, which must be set: never on --addr (docs/scaling.md)",
		set: func(c *serveConfig, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("must be true or false (got %q)", v)
			}
			c.pprof = b
			return nil
		}},
	{flag: "identity-issuer", env: "WAITROOM_IDENTITY_ISSUER", arg: "ISS", help: "require this iss in identity JWTs",
		set: text(func(c *serveConfig) *string { return &c.identityIssuer })},
	{flag: "identity-audience", env: "WAITROOM_IDENTITY_AUDIENCE", arg: "AUD", help: "require this aud in identity JWTs",
		set: text(func(c *serveConfig) *string { return &c.identityAudience })},
	{flag: "store-timeout", env: "WAITROOM_STORE_TIMEOUT", def: app.DefaultStoreTimeout.String(), arg: "DURATION",
		help: "longest wait on Redis or PostgreSQL (connect, reply, statement, request) before answering 503 store_unavailable",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.storeTimeout }, false)},
	{flag: "drain", env: "WAITROOM_DRAIN", def: app.DefaultDrain.String(), arg: "DURATION",
		help: "after SIGTERM, how long requests are still served while /readyz fails (0 = none)",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.drain }, true)},
	{flag: "shutdown-grace", env: "WAITROOM_SHUTDOWN_GRACE", def: app.DefaultShutdownGrace.String(), arg: "DURATION",
		help: "after the drain, how long requests in flight get to finish",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.shutdownGrace }, false)},
	{flag: "token-ttl", env: "WAITROOM_TOKEN_TTL", def: app.DefaultTokenTTL.String(), arg: "DURATION",
		help: "longest life of an admission token (status reads and push messages carry fresh ones)",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.tokenTTL }, false)},
	{flag: "history-interval", env: "WAITROOM_HISTORY_INTERVAL", def: recorder.DefaultInterval.String(), arg: "DURATION",
		help: "time between two samples of the console's history (one instance samples for all) and between two heartbeats",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.historyInterval }, false)},
	{flag: "max-conns", env: "WAITROOM_MAX_CONNS", arg: "N",
		help: "cap of open connections of every listener together (API, gate, metrics; push included), below the open-file limit; the last 64 serve only /healthz, /readyz, /metrics and admin calls, others get 503 (default: the open-file limit less a tenth of it or 512 files, whichever is more: 18000 of 20000 files, 3488 of 4000; see docs/deploy.md)",
		set:  positive(func(c *serveConfig) *int { return &c.maxConns })},
	{flag: "max-conns-per-client", env: "WAITROOM_MAX_CONNS_PER_CLIENT", def: strconv.Itoa(connlimit.DefaultMaxConnsPerClient), arg: "N",
		help: "cap of one client address's open connections (IPv6: its /64; a trusted proxy counts only in --max-conns): at the cap its oldest idle keep-alive connection is closed for a new one, or the new one is refused",
		set:  positive(func(c *serveConfig) *int { return &c.maxConnsPerClient })},
	{flag: "busy-idle-timeout", env: "WAITROOM_BUSY_IDLE_TIMEOUT", def: connlimit.DefaultBusyIdleTimeout.String(), arg: "DURATION",
		help: "from half of --max-conns open on, keep-alive connections idle this long are closed (otherwise after --idle-timeout); at most --idle-timeout",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.busyIdleTimeout }, false)},
	{flag: "idle-timeout", env: "WAITROOM_IDLE_TIMEOUT", def: app.DefaultIdleTimeout.String(), arg: "DURATION",
		help: "keep-alive connections idle this long are closed; behind a balancer that keeps its idle connections to the instances longer, set it and --busy-idle-timeout above the balancer's (Google's external Application Load Balancer: 600 s, so 620s; see docs/deploy.md)",
		set:  duration(func(c *serveConfig) *time.Duration { return &c.idleTimeout }, false)},

	// Secrets: the environment only.
	{env: "WAITROOM_ADMIN_KEY", help: fmt.Sprintf("bearer key of admin calls, at least %d bytes (required with Redis)", MinKeyLen),
		set: func(c *serveConfig, v string) error {
			if len(v) < MinKeyLen {
				return fmt.Errorf("must be at least %d bytes (it is %d); e.g. openssl rand -base64 32", MinKeyLen, len(v))
			}
			c.adminKey = v
			return nil
		}},
	{env: "WAITROOM_TOKEN_KEY", help: fmt.Sprintf(`secret the admission-token and ticket-id keys derive from, at least %d bytes (required with Redis; "new,old" keeps verifying old tokens and ticket ids)`, token.MinSecretLen),
		set: func(c *serveConfig, v string) error {
			for i, s := range strings.Split(v, ",") {
				if n := len(strings.TrimSpace(s)); n < token.MinSecretLen {
					which := "it is"
					if strings.Contains(v, ",") {
						which = fmt.Sprintf("key %d of the list is", i+1)
					}
					return fmt.Errorf("must be at least %d bytes (%s %d); e.g. openssl rand -base64 32", token.MinSecretLen, which, n)
				}
			}
			c.tokenKey = v
			return nil
		}},
	{env: "WAITROOM_IDENTITY_KEY", help: fmt.Sprintf("HS256 key of identity JWTs signed by the integrating site, at least %d bytes", MinKeyLen),
		set: func(c *serveConfig, v string) error {
			if len(v) < MinKeyLen {
				return fmt.Errorf("must be at least %d bytes (it is %d); RFC 7518 asks 32 for HS256", MinKeyLen, len(v))
			}
			c.identityKey = v
			return nil
		}},
	{env: "WAITROOM_IDENTITY_PUBLIC_KEY", help: "Ed25519 public key (PEM or base64) of EdDSA identity JWTs",
		set: text(func(c *serveConfig) *string { return &c.identityPublic })},
}

// otherEnv are the environment variables of this repository that serve does not read: the
// other commands' (chaos, crowd), the scripts' and the test harnesses' (TestOtherEnvIsComplete
// keeps the list true), which a serve they start may find in its environment.
var otherEnv = []string{
	"WAITROOM_CHAOS_POSTGRES_URL", "WAITROOM_CHAOS_KEEP", "WAITROOM_CHAOS_BINARY", "WAITROOM_CROWD_CHILD",
	"WAITROOM_CHAOS", "WAITROOM_BROWSER_TESTS", "WAITROOM_KEEP_CLUSTER", "WAITROOM_PG_CLUSTER", "WAITROOM_PG_PORT",
	"WAITROOM_REDIS_PORT", "WAITROOM_WAIT_SECONDS",
	"WAITROOM_CLI_TEST_RUN_MAIN", "WAITROOM_GATEWAY_TEST_RUN_MAIN", "WAITROOM_FLEET_USERS", "WAITROOM_SCREENSHOTS",
	"WAITROOM_PUSH_MAX_P50_MS", "WAITROOM_PUSH_CLIENTS", "WAITROOM_AUTO_EXPERIMENT",
}

// unknownEnv returns, sorted, the names of environ's ("NAME=value" entries, os.Environ) WAITROOM_
// variables that are neither serve's settings nor in otherEnv: a misspelt one
// (WAITROOM_SHUTDOWN_TIMEOUT for WAITROOM_SHUTDOWN_GRACE) would otherwise be ignored without a
// word, where a misspelt config-file key is refused.
func unknownEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "WAITROOM_") || name == configEnv || slices.Contains(otherEnv, name) ||
			slices.ContainsFunc(serveSettings, func(s setting) bool { return s.env == name }) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// settingsByName returns the rows of serveSettings with the given flag names or environment
// variables (the secrets), in the table's order; it panics on a name not in the table.
func settingsByName(names ...string) []setting {
	var out []setting
	for _, n := range names {
		i := slices.IndexFunc(serveSettings, func(s setting) bool { return s.flag == n || (s.flag == "" && s.env == n) })
		if i < 0 {
			panic("cli: no setting " + n)
		}
		out = append(out, serveSettings[i])
	}
	return out
}

// settingValue is a setting's flag: it keeps the text given on the command line; parsing and
// checking happen once the winning source is known (see load).
type settingValue struct {
	v      string
	isBool bool
}

func (f *settingValue) String() string     { return f.v }
func (f *settingValue) Set(v string) error { f.v = v; return nil }
func (f *settingValue) IsBoolFlag() bool   { return f.isBool }

// settingsFlags is a command's settings bound to its FlagSet.
type settingsFlags struct {
	fs     *flag.FlagSet
	rows   []setting
	values map[string]*settingValue // by flag name
	config *string
}

// defineSettings defines a flag for each row that has one, and --config.
func defineSettings(fs *flag.FlagSet, rows []setting) *settingsFlags {
	sf := &settingsFlags{fs: fs, rows: rows, values: map[string]*settingValue{}, config: new(string)}
	fs.StringVar(sf.config, configFlag, "", "config file (YAML or JSON)")
	for _, s := range rows {
		if s.flag == "" {
			continue
		}
		v := &settingValue{isBool: s.arg == ""}
		sf.values[s.flag] = v
		fs.Var(v, s.flag, s.help)
	}
	return sf
}

// load fills c from the parsed flags, the environment (getenv) and the config file, each row
// from the first source that has it: flag, environment, config file, default. The config file
// is --config, else $WAITROOM_CONFIG, else none. The file may hold any of serve's keys (the
// rows of a command that uses fewer, like reconcile, ignore the others); a key that is none
// of serve's is an error. Every error is a usage error naming the source and the setting.
func (sf *settingsFlags) load(c *serveConfig, getenv func(string) string) error {
	set := map[string]bool{}
	sf.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	path := *sf.config
	if !set[configFlag] {
		path = getenv(configEnv)
	}
	var file map[string]configValue
	if path != "" {
		var err error
		if file, err = readConfigFile(path); err != nil {
			return usageError{Err: err}
		}
	}
	for _, s := range sf.rows {
		v, from := s.def, ""
		if fv, ok := file[s.key()]; ok && s.flag != "" {
			v, from = fv.text, fmt.Sprintf("%s line %d: %s", path, fv.line, s.key())
		}
		if e := getenv(s.env); e != "" {
			v, from = e, s.env
		}
		if set[s.flag] && s.flag != "" {
			v, from = sf.values[s.flag].v, "--"+s.flag
		}
		if from == "" && v == "" {
			continue // unset, no default: the field keeps its zero value
		}
		if err := s.set(c, v); err != nil {
			if from == "" { // a default that does not parse: a bug of the table
				panic(fmt.Sprintf("cli: default of %s: %v", s.env, err))
			}
			return usagef("%s: %v", from, err)
		}
	}
	return nil
}

// configValue is one value of a config file, as text, and the line it is on.
type configValue struct {
	text string
	line int
}

// readConfigFile reads a config file: a YAML (or JSON) mapping of setting keys (see
// setting.key) to scalars, or to lists of scalars for list settings. An empty file is no
// settings. Errors name the file and, where the parser knows it, the line: a key that is no
// setting (with the known keys), a secret's key (secrets are read from the environment only),
// a key given twice, a value that is a mapping, or a list for a setting that takes one value.
func readConfigFile(path string) (map[string]configValue, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s line %d: want a mapping of settings (key: value)", path, root.Line)
	}
	out := map[string]configValue{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		at := fmt.Sprintf("%s line %d", path, k.Line)
		j := slices.IndexFunc(serveSettings, func(s setting) bool { return s.flag != "" && s.key() == k.Value })
		if j < 0 {
			for _, s := range serveSettings {
				if s.flag == "" && strings.EqualFold("WAITROOM_"+k.Value, s.env) {
					return nil, fmt.Errorf("%s: %q is a secret: set %s in the environment, not in a file", at, k.Value, s.env)
				}
			}
			return nil, fmt.Errorf("%s: unknown key %q (known: %s)", at, k.Value, strings.Join(configKeys(), ", "))
		}
		s := serveSettings[j]
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("%s: %q is given twice", at, k.Value)
		}
		var t string
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			t = "" // "key:" with no value: the default
		case v.Kind == yaml.ScalarNode:
			t = v.Value
		case v.Kind == yaml.SequenceNode && s.list:
			parts := make([]string, 0, len(v.Content))
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%s line %d: %s: want a list of single values", path, e.Line, k.Value)
				}
				parts = append(parts, e.Value)
			}
			t = strings.Join(parts, ",")
		case s.list:
			return nil, fmt.Errorf("%s: %s: want a value or a list of values", at, k.Value)
		default:
			return nil, fmt.Errorf("%s: %s: want a single value", at, k.Value)
		}
		if t == "" {
			continue
		}
		out[k.Value] = configValue{text: t, line: v.Line}
	}
	return out, nil
}

// configKeys returns the keys a config file may have, in the table's order.
func configKeys() []string {
	var keys []string
	for _, s := range serveSettings {
		if s.flag != "" {
			keys = append(keys, s.key())
		}
	}
	return keys
}

// writeSettingsHelp writes the settings part of a command's --help: --config, then each row
// with its flag, environment variable, config-file key, default and description.
func writeSettingsHelp(w io.Writer, rows []setting) {
	fmt.Fprintf(w, "Settings: a flag wins over its environment variable, which wins over the config file's key,\nwhich wins over the default. An empty environment variable counts as unset.\n\n")
	fmt.Fprintf(w, "  --%s FILE, %s\n        config file (YAML or JSON): a mapping of the keys below; an unknown key is an error\n", configFlag, configEnv)
	var secrets []setting
	for _, s := range rows {
		if s.flag == "" {
			secrets = append(secrets, s)
			continue
		}
		name := "--" + s.flag
		if s.arg != "" {
			name += " " + s.arg
		} else {
			name += "[=false]"
		}
		fmt.Fprintf(w, "  %s, %s, key %s\n        %s", name, s.env, s.key(), s.help)
		if s.list {
			fmt.Fprint(w, "; in the config file also a list")
		}
		if s.def != "" {
			fmt.Fprintf(w, " (default %q)", s.def)
		}
		fmt.Fprintln(w)
	}
	if len(secrets) > 0 {
		fmt.Fprintf(w, "\nSecrets: the environment only, never a flag (visible in ps) nor the config file.\n\n")
		for _, s := range secrets {
			fmt.Fprintf(w, "  %s\n        %s\n", s.env, s.help)
		}
	}
}

package deploy_test

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/schema"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const composePath = "compose/compose.yaml"

// loadCompose loads compose.yaml as `docker compose config` does (compose-go is the library
// the docker compose plugin loads files with): interpolation with env, schema validation,
// normalisation.
func loadCompose(env map[string]string) (*types.Project, error) {
	file, err := filepath.Abs(composePath)
	if err != nil {
		return nil, err
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(file),
		ConfigFiles: []types.ConfigFile{{Filename: file}},
		Environment: env,
	})
}

// TestComposeSchema validates the file as written (before interpolation) against the Compose
// Specification's JSON schema, the copy embedded in compose-go (schema/compose-spec.json,
// from https://github.com/compose-spec/compose-spec/blob/main/schema/compose-spec.json),
// pinned by go.sum.
func TestComposeSchema(t *testing.T) {
	src, err := os.ReadFile(composePath)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal(src, &raw))
	require.NoError(t, schema.Validate(raw))

	// The schema is not a formality: a misspelt key fails it.
	bad := strings.Replace(string(src), "    healthcheck:\n", "    healtcheck:\n", 1)
	require.NotEqual(t, string(src), bad)
	var badRaw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(bad), &badRaw))
	require.Error(t, schema.Validate(badRaw))
}

func TestComposeNeedsKeys(t *testing.T) {
	_, err := loadCompose(map[string]string{"WAITROOM_TOKEN_KEY": "t"})
	require.ErrorContains(t, err, "WAITROOM_ADMIN_KEY")
	_, err = loadCompose(map[string]string{"WAITROOM_ADMIN_KEY": "a"})
	require.ErrorContains(t, err, "WAITROOM_TOKEN_KEY")
}

func TestCompose(t *testing.T) {
	p, err := loadCompose(map[string]string{"WAITROOM_ADMIN_KEY": "admin-k", "WAITROOM_TOKEN_KEY": "token-k"})
	require.NoError(t, err)
	instances := []string{"waitroom-1", "waitroom-2", "waitroom-3"}
	require.ElementsMatch(t, append([]string{"redis", "postgres", "lb"}, instances...), p.ServiceNames())

	redis, postgres, lb := p.Services["redis"], p.Services["postgres"], p.Services["lb"]
	// Redis with the settings docs/durability.md recommends.
	require.Equal(t, types.ShellCommand{"redis-server", "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction"}, redis.Command)
	// The append-only file and PostgreSQL's data outlive their containers (down, then up).
	for svc, dir := range map[*types.ServiceConfig]string{&redis: "/data", &postgres: "/var/lib/postgresql/data"} {
		var named bool
		for _, v := range svc.Volumes {
			named = named || v.Type == types.VolumeTypeVolume && v.Target == dir && p.Volumes[v.Source].Name != ""
		}
		require.True(t, named, "%s: %s on a named volume", svc.Name, dir)
	}
	for _, s := range []types.ServiceConfig{redis, postgres, lb} {
		require.NotNil(t, s.HealthCheck, "%s has a healthcheck", s.Name)
		require.NotEmpty(t, s.HealthCheck.Test, s.Name)
	}

	d := parseDockerfile(t)
	var exposed string // the image's port
	for _, c := range d.stages[len(d.stages)-1].Commands {
		if e, ok := c.(*instructions.ExposeCommand); ok {
			require.Len(t, e.Ports, 1)
			exposed = e.Ports[0]
		}
	}
	require.NotEmpty(t, exposed)

	known := waitroomEnv(t)
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	var image string
	for _, name := range instances {
		s := p.Services[name]
		// One image, built from this repository's Dockerfile.
		if image == "" {
			image = s.Image
		}
		require.Equal(t, image, s.Image, name)
		require.NotNil(t, s.Build, "%s builds the image", name)
		require.Equal(t, root, s.Build.Context, "%s: the build context is the repository root", name)
		require.FileExists(t, filepath.Join(s.Build.Context, s.Build.Dockerfile))
		require.Equal(t, "deploy/docker/Dockerfile", s.Build.Dockerfile)
		require.Empty(t, s.Ports, "%s is reached through the load balancer only", name)

		// Only variables waitroom reads, and the ones scale-out requires.
		env := map[string]string{}
		for k, v := range s.Environment {
			require.True(t, known[k], "%s sets %s, which waitroom does not read", name, k)
			require.NotNil(t, v, "%s: %s has a value", name, k)
			env[k] = *v
		}
		require.Equal(t, "admin-k", env["WAITROOM_ADMIN_KEY"])
		require.Equal(t, "token-k", env["WAITROOM_TOKEN_KEY"])
		require.Equal(t, ":"+exposed, env["WAITROOM_ADDR"])
		require.Equal(t, []string{exposed}, []string(s.Expose))

		// The URLs name the services, their ports and the database compose creates.
		ru, err := url.Parse(env["WAITROOM_REDIS_URL"])
		require.NoError(t, err)
		require.Equal(t, "redis", ru.Scheme)
		require.Equal(t, "redis:6379", ru.Host)
		du, err := url.Parse(env["WAITROOM_DATABASE_URL"])
		require.NoError(t, err)
		require.Equal(t, "postgres", du.Scheme)
		require.Equal(t, "postgres:5432", du.Host)
		require.Equal(t, *postgres.Environment["POSTGRES_USER"], du.User.Username())
		pw, _ := du.User.Password()
		require.Equal(t, *postgres.Environment["POSTGRES_PASSWORD"], pw)
		require.Equal(t, "/"+*postgres.Environment["POSTGRES_DB"], du.Path)

		// The stop's budget (budget_test.go), with the drain and grace the instance sets.
		def := serveStopDefaults(t)
		stop := stopTimes{drain: envDuration(t, env, "WAITROOM_DRAIN", def.drain), grace: envDuration(t, env, "WAITROOM_SHUTDOWN_GRACE", def.grace)}
		require.NotNil(t, s.StopGracePeriod, "%s: stop_grace_period", name)
		require.Equal(t, stop.budget(), time.Duration(*s.StopGracePeriod), "%s: stop_grace_period for %+v", name, stop)

		// Started once the store answers.
		for _, dep := range []string{"redis", "postgres"} {
			require.Equal(t, types.ServiceConditionHealthy, s.DependsOn[dep].Condition, "%s waits for %s", name, dep)
		}
	}

	// The load balancer: published port to nginx's listen port, upstreams = the instances.
	require.Len(t, lb.Ports, 1)
	conf := nginxConf(t, lb)
	listen := regexp.MustCompile(`(?m)^\s*listen\s+(\d+);`).FindStringSubmatch(conf)
	require.NotNil(t, listen)
	require.Equal(t, listen[1], itoa(int(lb.Ports[0].Target)))
	block := regexp.MustCompile(`upstream\s+(\w+)\s*\{([^}]*)\}`).FindStringSubmatch(conf)
	require.NotNil(t, block, "an upstream block")
	require.Contains(t, conf, "proxy_pass http://"+block[1]+";")
	var upstreams []string
	for _, m := range regexp.MustCompile(`(?m)^\s*server\s+(\S+?)[\s;]`).FindAllStringSubmatch(block[2], -1) {
		upstreams = append(upstreams, m[1])
	}
	var want []string
	for _, name := range instances {
		want = append(want, net.JoinHostPort(name, exposed))
		require.Contains(t, lb.DependsOn, name)
	}
	require.ElementsMatch(t, want, upstreams)
	// The instances' names are looked up again through Docker's DNS (resolve, which needs the
	// upstream's zone and a resolver; open-source nginx has it since 1.27.3): an instance
	// recreated with a new address would get no traffic from an nginx that kept the old one.
	for _, m := range regexp.MustCompile(`(?m)^\s*server\s+(\S+)([^;]*);`).FindAllStringSubmatch(block[2], -1) {
		require.Regexp(t, `\bresolve\b`, m[2], "upstream server %s is resolved once, at nginx's start", m[1])
	}
	require.Regexp(t, `(?m)^\s*zone\s+\w+\s+\d+k;`, block[2], "resolve needs the upstream's zone")
	require.Regexp(t, `(?m)^\s*resolver\s+127\.0\.0\.11[\s;]`, conf, "resolve needs Docker's DNS as the resolver")
	tag := regexp.MustCompile(`^nginx:(\d+)\.(\d+)`).FindStringSubmatch(lb.Image)
	require.NotNil(t, tag, "lb's image %q names nginx's version", lb.Image)
	require.True(t, atoi(t, tag[1]) > 1 || atoi(t, tag[2]) >= 28, "lb's image %q: resolve needs nginx 1.28 or later (mainline 1.27.3)", lb.Image)
	// WebSocket upgrades and SSE pass through.
	for _, directive := range []string{
		"proxy_http_version 1.1;", "proxy_set_header Upgrade $http_upgrade;",
		"proxy_set_header Connection $connection_upgrade;", "proxy_buffering off;",
	} {
		require.Contains(t, conf, directive)
	}
	// Timeouts against the service's own: nginx closes an idle upstream connection before a busy
	// instance does (a request sent on one the instance closed is lost, not retried), and a
	// live-update stream, quiet but for its pings, outlives several of them.
	busyIdle := serviceDuration(t, "internal/connlimit/connlimit.go", "DefaultBusyIdleTimeout")
	ping := serviceDuration(t, "internal/push/config.go", "DefaultPingInterval")
	ka := regexp.MustCompile(`(?m)^\s*keepalive_timeout\s+(\d+)s;`).FindStringSubmatch(block[2])
	require.NotNil(t, ka, "the upstream's keepalive_timeout, in seconds")
	require.Less(t, time.Duration(atoi(t, ka[1]))*time.Second, busyIdle, "upstream keepalive_timeout not below the instances' --busy-idle-timeout")
	push := regexp.MustCompile(`(?s)location ~ \^/v1/events/[^{]*\(ws\|events\)\$ \{([^}]*)\}`).FindStringSubmatch(conf)
	require.NotNil(t, push, "a location for the live updates (ws, events)")
	rt := regexp.MustCompile(`(?m)^\s*proxy_read_timeout\s+(\d+)s;`).FindStringSubmatch(push[1])
	require.NotNil(t, rt, "the live updates' proxy_read_timeout, in seconds")
	require.GreaterOrEqual(t, time.Duration(atoi(t, rt[1]))*time.Second, 3*ping, "the live updates' proxy_read_timeout cuts a stream between its pings")
	tries := regexp.MustCompile(`(?m)^\s*proxy_next_upstream_tries\s+(\d+);`).FindStringSubmatch(conf)
	require.True(t, tries != nil && atoi(t, tries[1]) >= 2, "proxy_next_upstream_tries bounds the retries over hung instances")
	require.Regexp(t, `(?m)^\s*proxy_next_upstream_timeout\s+[1-9]\d*s;`, conf, "proxy_next_upstream_timeout bounds a request's retries")
	// Open files: a proxied connection is two (the visitor's and the instance's), so each
	// worker's limit (worker_rlimit_nofile) is at least twice its worker_connections, and the
	// container's nofile limits (soft and hard: the workers cannot raise the hard one) allow it.
	wc := regexp.MustCompile(`(?m)^\s*worker_connections\s+(\d+);`).FindStringSubmatch(conf)
	require.NotNil(t, wc, "worker_connections")
	rl := regexp.MustCompile(`(?m)^\s*worker_rlimit_nofile\s+(\d+);`).FindStringSubmatch(conf)
	require.NotNil(t, rl, "worker_rlimit_nofile: without it a worker keeps the container's limit")
	conns, files := atoi(t, wc[1]), atoi(t, rl[1])
	require.GreaterOrEqual(t, files, 2*conns, "worker_rlimit_nofile below two files per worker connection")
	nofile := lb.Ulimits["nofile"]
	require.NotNil(t, nofile, "lb sets ulimits: nofile")
	require.Zero(t, nofile.Single, "lb's nofile gives soft and hard")
	require.GreaterOrEqual(t, nofile.Soft, files, "lb's soft nofile below worker_rlimit_nofile")
	require.GreaterOrEqual(t, nofile.Hard, nofile.Soft)
	// Each instance may get all of lb's connections (the others down): its hard limit, which the
	// service raises its soft one to at start, holds them, or it would cap its connections and
	// push below that (a host's default of 1,024 gives 512 connections).
	for _, name := range instances {
		nf := p.Services[name].Ulimits["nofile"]
		require.NotNil(t, nf, "%s sets ulimits: nofile", name)
		require.GreaterOrEqual(t, nf.Hard, conns, "%s's hard nofile below lb's worker_connections", name)
		require.GreaterOrEqual(t, nf.Hard, nf.Soft, name)
	}
	// Every depends_on condition is one the dependency can meet.
	for _, s := range p.Services {
		for dep, c := range s.DependsOn {
			require.Contains(t, p.Services, dep, "%s depends on %s", s.Name, dep)
			if c.Condition == types.ServiceConditionHealthy {
				require.NotNil(t, p.Services[dep].HealthCheck, "%s waits for %s to be healthy, which has no healthcheck", s.Name, dep)
			}
		}
	}
	// Who a visitor is: nginx, the edge, overwrites the visitor's X-Forwarded-For with the
	// address it saw and drops Forwarded; the instances read that header from lb alone, at the
	// address fixed for it in the project's network, and trust no other peer there (the
	// Docker host at the gateway, Redis, PostgreSQL, each other).
	xff := regexp.MustCompile(`(?m)^\s*proxy_set_header\s+X-Forwarded-For\s+(\S+);`).FindAllStringSubmatch(conf, -1)
	require.Len(t, xff, 1, "one X-Forwarded-For")
	require.Equal(t, "$remote_addr", xff[0][1], "an edge proxy passes no X-Forwarded-For of the visitor's on")
	require.Regexp(t, `(?m)^\s*proxy_set_header\s+Forwarded\s+"";`, conf)
	subnet := composeSubnet(t, p)
	require.Equal(t, "172.29.80.0/24", subnet.String())
	for _, name := range append([]string{"lb"}, instances...) {
		require.Equal(t, []string{"default"}, slices.Collect(maps.Keys(p.Services[name].Networks)), "%s is on the project's network", name)
	}
	lbAddr := composeLBAddr(t, p, subnet)
	require.Equal(t, "172.29.80.10", lbAddr.String())
	for _, name := range instances {
		env := p.Services[name].Environment
		require.Equal(t, lbAddr.String(), *env["WAITROOM_TRUSTED_PROXIES"], "%s trusts lb's address alone", name)
		require.Equal(t, "X-Forwarded-For", *env["WAITROOM_CLIENT_IP_HEADER"], "%s reads the header nginx writes", name)
	}

	// The lb's healthcheck probes the path the instances answer.
	require.True(t, slices.Contains(lb.HealthCheck.Test, "http://127.0.0.1:"+listen[1]+"/readyz") ||
		slices.Contains(lb.HealthCheck.Test, "http://127.0.0.1/readyz"), "%v", lb.HealthCheck.Test)
}

// nginxConf returns the nginx.conf the lb service mounts.
func nginxConf(t *testing.T, lb types.ServiceConfig) string {
	t.Helper()
	for _, v := range lb.Volumes {
		if v.Target == "/etc/nginx/nginx.conf" {
			require.Equal(t, types.VolumeTypeBind, v.Type)
			b, err := os.ReadFile(v.Source)
			require.NoError(t, err)
			return string(b)
		}
	}
	t.Fatal("lb mounts no /etc/nginx/nginx.conf")
	return ""
}

// composeSubnet returns the subnet of the project's network: the one fixed in its IPAM config.
func composeSubnet(t *testing.T, p *types.Project) netip.Prefix {
	t.Helper()
	n, ok := p.Networks["default"]
	require.True(t, ok, "the project's default network")
	require.NotNil(t, n.Ipam.Config, "the default network fixes its subnet")
	require.Len(t, n.Ipam.Config, 1)
	subnet, err := netip.ParsePrefix(n.Ipam.Config[0].Subnet)
	require.NoError(t, err)
	require.True(t, subnet.Addr().IsPrivate(), "%s is a private range", subnet)
	require.Equal(t, subnet.Masked(), subnet)
	return subnet
}

// composeLBAddr returns lb's fixed address on the project's network, which must lie in subnet
// and not be its network, gateway (the first host) or broadcast address.
func composeLBAddr(t *testing.T, p *types.Project, subnet netip.Prefix) netip.Addr {
	t.Helper()
	n := p.Services["lb"].Networks["default"]
	require.NotNil(t, n, "lb names its address on the project's network")
	a, err := netip.ParseAddr(n.Ipv4Address)
	require.NoError(t, err)
	require.True(t, subnet.Contains(a), "lb's %s lies in %s", a, subnet)
	require.NotEqual(t, subnet.Addr(), a)
	require.NotEqual(t, subnet.Addr().Next(), a, "the first host is Docker's gateway")
	return a
}

// TestComposeSubnet: the network and lb's address in it move with two variables, and the
// instances' trust with lb's address.
func TestComposeSubnet(t *testing.T) {
	p, err := loadCompose(map[string]string{"WAITROOM_ADMIN_KEY": "a", "WAITROOM_TOKEN_KEY": "t",
		"WAITROOM_SUBNET": "10.123.0.0/24", "WAITROOM_LB_ADDR": "10.123.0.10"})
	require.NoError(t, err)
	subnet := composeSubnet(t, p)
	require.Equal(t, "10.123.0.0/24", subnet.String())
	require.Equal(t, "10.123.0.10", composeLBAddr(t, p, subnet).String())
	for _, name := range []string{"waitroom-1", "waitroom-2", "waitroom-3"} {
		require.Equal(t, "10.123.0.10", *p.Services[name].Environment["WAITROOM_TRUSTED_PROXIES"], name)
	}
}

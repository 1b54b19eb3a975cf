package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/crowd"
	"github.com/waitroom/waitroom/internal/nginxtest"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

const (
	composeFile      = "../../deploy/compose/compose.yaml"
	composeNginxConf = "../../deploy/compose/nginx.conf"
	// composeCrowd: the crowd, 1,000 people from 256 addresses.
	composeCrowdUsers = 1000
	composeCrowdAddrs = "127.0.1.0/24"
)

// TestComposeNginxCrowd runs deploy/compose as a crowd meets it: its nginx.conf (rewritten
// only in addresses, ports and paths) in front of two `waitroom serve` instances on one Redis
// and one PostgreSQL database, with the client-address settings compose.yaml gives them, and
// 1,000 users from 256 loopback addresses joining through nginx, an event at the default
// limits. Every user is admitted and none gets a 429. Then the same run with the instances
// trusting no proxy, as compose was shipped (issue 21, item 1): every user is nginx's one
// address, and its limits per client turn on the crowd (429s, users not joined in the time).
// And through the first nginx, requests from a trusted address naming others in their own
// X-Forwarded-For are one client: nginx, the edge, overwrites the header.
func TestComposeNginxCrowd(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and four serve processes")
	}
	env := composeEnv(t)
	trusted, header := env["WAITROOM_TRUSTED_PROXIES"], env["WAITROOM_CLIENT_IP_HEADER"]
	if trusted == "" || header == "" {
		t.Fatalf("compose.yaml sets WAITROOM_TRUSTED_PROXIES %q, WAITROOM_CLIENT_IP_HEADER %q: the instances would see nginx as every visitor", trusted, header)
	}
	// compose's nginx reaches the instances from its fixed address (trusted); here from
	// 127.0.0.1, which is added. The crowd's 127.0.1.x are in neither.
	users := netip.MustParsePrefix(composeCrowdAddrs)
	ps, err := clientaddr.ParseCIDRs(trusted)
	if err != nil {
		t.Fatalf("compose's WAITROOM_TRUSTED_PROXIES %q: %v", trusted, err)
	}
	for _, p := range ps {
		if p.Overlaps(users) {
			t.Fatalf("compose trusts %s, which holds the crowd's %s", p, users)
		}
	}

	front, instances, adminKey := composeFront(t, trusted+",127.0.0.1", header)
	rep := composeCrowdRun(t, front, adminKey, time.Minute)
	t.Logf("with compose's trusted proxies: %d users from %s through nginx: %d joined, %d admitted in %.1f s; errors %v",
		composeCrowdUsers, composeCrowdAddrs, rep.Joined, rep.Admitted, rep.DurationS, rep.Errors)
	if p := rep.Problems(); len(p) > 0 {
		t.Errorf("problems: %v", p)
	}
	if rep.Errors["429"] != 0 || rep.Joined != composeCrowdUsers || rep.Admitted != composeCrowdUsers {
		t.Errorf("%d × 429, %d joined, %d admitted of %d: want no 429, all joined and admitted", rep.Errors["429"], rep.Joined, rep.Admitted, composeCrowdUsers)
	}
	nginxtest.PageThrough(t, front, "compose")
	spoofedJoins(t, front, adminKey)
	if n := untrustedForwarded(t, instances, adminKey); n != 0 {
		t.Errorf("waitroom_untrusted_forwarded_requests_total %v behind compose's nginx: the instances do not trust it", n)
	}

	front, instances, adminKey = composeFront(t, "", header)
	rep = composeCrowdRun(t, front, adminKey, 8*time.Second)
	t.Logf("without trusted proxies: %d joined, %d admitted, %d lost in %.1f s; errors %v",
		rep.Joined, rep.Admitted, rep.Lost, rep.DurationS, rep.Errors)
	if rep.Errors["429"] == 0 || rep.Joined >= composeCrowdUsers {
		t.Errorf("without trusted proxies: %d × 429, %d joined: the run cannot tell the settings apart", rep.Errors["429"], rep.Joined)
	}
	if n := untrustedForwarded(t, instances, adminKey); n == 0 {
		t.Error("without trusted proxies, the instances did not notice nginx's X-Forwarded-For (waitroom_untrusted_forwarded_requests_total 0)")
	}
}

// untrustedForwarded sums waitroom_untrusted_forwarded_requests_total over the instances.
func untrustedForwarded(t *testing.T, instances []string, adminKey string) float64 {
	t.Helper()
	var n float64
	for _, base := range instances {
		n += scrape(t, base, adminKey)["waitroom_untrusted_forwarded_requests_total"]
	}
	return n
}

// composeEnv returns the environment compose.yaml gives every instance (its x-waitroom
// anchor), with ${VAR:-default} read as compose does when VAR is unset.
func composeEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Waitroom struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"x-waitroom"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Waitroom.Environment) == 0 {
		t.Fatal("compose.yaml: no x-waitroom environment")
	}
	unset := regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)
	env := map[string]string{}
	for k, v := range doc.Waitroom.Environment {
		env[k] = unset.ReplaceAllString(v, "$1")
	}
	return env
}

// composeFront starts two instances on a fresh Redis prefix and database, trusting trusted
// (none when empty) with header, and compose's nginx.conf in front of them; it returns nginx's
// base URL, the instances' and the admin key.
func composeFront(t *testing.T, trusted, header string) (front string, instances []string, adminKey string) {
	t.Helper()
	redisURL := os.Getenv("TEST_REDIS_URL")
	if redisURL == "" {
		redisURL = redistest.DefaultURL
	}
	adminKey = base64.StdEncoding.EncodeToString([]byte("compose-test-admin-key-012345678"))
	env := append(os.Environ(), envRunMain+"=1",
		"WAITROOM_REDIS_URL="+redisURL, "WAITROOM_DATABASE_URL="+sqltest.Postgres(t),
		"WAITROOM_REDIS_PREFIX="+redistest.Prefix(t, redistest.Client(t)),
		"WAITROOM_ADMIN_KEY="+adminKey, "WAITROOM_TOKEN_KEY=compose-test-token-key-0123456789abcdef",
		"WAITROOM_TRUSTED_PROXIES="+trusted, "WAITROOM_CLIENT_IP_HEADER="+header,
		"WAITROOM_DRAIN=0") // no load balancer to drain for at the test's end
	instances = []string{startServeProcess(t, env), startServeProcess(t, env)}
	return composeNginx(t, instances), instances, adminKey
}

// composeNginx runs compose's nginx.conf (rewritten only in addresses, ports and paths) in
// front of instances (base URLs), its three upstream servers over them in turn, and returns
// nginx's base URL.
func composeNginx(t *testing.T, instances []string, extra ...string) string {
	t.Helper()
	conf, err := os.ReadFile(composeNginxConf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := nginxtest.FreeAddr(t)
	mainPaths, httpPaths := nginxtest.Paths(dir)
	repl := map[string]string{
		"listen 80;":             "listen " + addr + ";",
		"worker_processes auto;": mainPaths + "worker_processes auto;",
		"http {":                 "http {" + httpPaths,
	}
	for i := 1; i <= 3; i++ { // compose's three instances are this test's two
		repl[fmt.Sprintf("server waitroom-%d:8080 ", i)] = "server " + strings.TrimPrefix(instances[(i-1)%2], "http://") + " "
	}
	// resolve is nginx 1.27.3's and later (compose runs nginx:1.29; deploy's compose test
	// checks it is there): Debian 12's nginx 1.22 would refuse it, and the addresses here are
	// literal, so it is taken out (the resolver stays).
	for i := 0; i+1 < len(extra); i += 2 {
		repl[extra[i]] = extra[i+1]
	}
	unresolved := strings.ReplaceAll(string(conf), " resolve;", ";")
	nginxtest.Start(t, dir, nginxtest.Rewrite(t, "deploy/compose/nginx.conf", unresolved, repl), addr)
	return "http://" + addr
}

// TestComposeNginxNoInstance: with every instance down (stopped, restarting) or hung (accepting
// and never answering), compose's nginx answers the page, a join and /readyz, and with them
// down the live updates too, 503 waiting_room_unavailable with Retry-After, a problem the
// waiting page and API clients retry after, not its bare 502 or 504 page, and not after an hour
// (the read timeout of 30 s is 1 s here; the live updates keep their hour, so the hung case
// does not send them).
func TestComposeNginxNoInstance(t *testing.T) {
	nginxtest.Require(t)
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	paths := []string{"GET /e/ev", "POST /v1/events/ev/tickets", "GET /readyz"}
	for _, c := range []struct {
		name      string
		instances []string
		paths     []string
	}{
		{"down", []string{"http://" + nginxtest.FreeAddr(t), "http://" + nginxtest.FreeAddr(t)},
			append(paths, "GET /v1/events/ev/tickets/abc/ws", "GET /v1/events/ev/tickets/abc/events")},
		{"hung", []string{"http://" + hung.Addr().String(), "http://" + hung.Addr().String()}, paths},
	} {
		t.Run(c.name, func(t *testing.T) {
			front := composeNginx(t, c.instances, "proxy_read_timeout 30s;", "proxy_read_timeout 1s;")
			for _, mp := range c.paths {
				method, path, _ := strings.Cut(mp, " ")
				start := time.Now()
				res, err := http.DefaultClient.Do(mustRequest(t, method, front+path, "", "Accept", "text/html"))
				require.NoError(t, err)
				require.Equal(t, 503, res.StatusCode, mp)
				require.Less(t, time.Since(start), 5*time.Second, mp)
				code, retry := problemOf(t, res)
				require.Equal(t, "waiting_room_unavailable", code, mp)
				require.Equal(t, "5", retry, mp)
			}
		})
	}
}

// composeCrowdRun runs the crowd through front on a new event at the default limits.
func composeCrowdRun(t *testing.T, front, adminKey string, deadline time.Duration) crowd.Report {
	t.Helper()
	cfg := crowd.DefaultConfig()
	cfg.Targets, cfg.Event, cfg.Users, cfg.AdminKey = []string{front}, "compose", composeCrowdUsers, adminKey
	cfg.UserAddrs, cfg.Deadline = netip.MustParsePrefix(composeCrowdAddrs), deadline
	rep, err := crowd.Run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// spoofedJoins: a visitor inside the trusted network (in compose, the Docker host, whose
// connections reach nginx from the network's gateway) sends joins each naming another address
// in its own X-Forwarded-For. nginx replaces the header, so they are one client, limited like
// one: joins_per_client (50 at once) ends in 429 within 60 joins.
func spoofedJoins(t *testing.T, front, adminKey string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, front+"/v1/events/spoof", strings.NewReader(`{"name":"Spoof","max_active":1000}`))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("PUT event: %v %v", res, err)
	}
	res.Body.Close()
	for i := range 60 {
		req, _ := http.NewRequest(http.MethodPost, front+"/v1/events/spoof/tickets", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		req.Header.Set("Forwarded", fmt.Sprintf("for=203.0.113.%d", i+1))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusTooManyRequests {
			t.Logf("spoofed X-Forwarded-For: join %d answered 429, as one client's", i+1)
			return
		}
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("join %d: %d", i+1, res.StatusCode)
		}
	}
	t.Error("60 joins from one address naming 60 others in X-Forwarded-For were 60 clients: nginx passed the visitor's header on")
}

// TestComposeNginxPassesOverAWaitingInstance: an instance waiting for its stores (started while
// they did not answer) refuses what is not a probe, so compose's nginx, which has no health
// checks of its own, passes over it as over a stopped one: every GET is answered by the other
// instance, and a join is never answered 503 store_unavailable by the waiting one (at most
// nginx's 503 waiting_room_unavailable, for a join it could not retry there).
func TestComposeNginxPassesOverAWaitingInstance(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and two serve processes")
	}
	_, _, env, adminKey := storeProxies(t) // the healthy instance's stores, through open proxies
	healthy := startServeProcess(t, append(append(os.Environ(), envRunMain+"=1", "WAITROOM_DRAIN=0"), env...))
	redis, _, waitEnv, _ := storeProxies(t)
	redis.Cut()
	waiting := startServeProc(t, waitEnv, "--addr", "127.0.0.1:0")
	front := composeNginx(t, []string{healthy, waiting.base(t)}) // servers: healthy, waiting, healthy

	res, err := http.DefaultClient.Do(mustRequest(t, "PUT", healthy+"/v1/events/ev", `{"max_active":100}`, "Authorization", "Bearer "+adminKey))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 201, res.StatusCode)
	for i := range 9 {
		res, err := http.Get(front + "/v1/events/ev")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, 200, res.StatusCode, "GET %d through nginx", i)
	}
	var ticket string
	for i := range 6 {
		res, err := http.DefaultClient.Do(mustRequest(t, "POST", front+"/v1/events/ev/tickets", ""))
		require.NoError(t, err)
		if res.StatusCode == 201 {
			var tk struct {
				TicketID string `json:"ticket_id"`
			}
			require.NoError(t, json.NewDecoder(res.Body).Decode(&tk))
			res.Body.Close()
			ticket = tk.TicketID
			continue
		}
		require.Equal(t, 503, res.StatusCode, "join %d through nginx", i)
		code, _ := problemOf(t, res)
		require.Equal(t, "waiting_room_unavailable", code, "join %d through nginx", i)
	}
	require.NotEmpty(t, ticket, "no join answered 201")
	// The ticket's live updates pass through nginx's location for them (a WebSocket).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(front, "http")+"/v1/events/ev/tickets/"+ticket+"/ws", nil)
	require.NoError(t, err, "the ticket's WebSocket through nginx")
	defer ws.CloseNow()
	_, msg, err := ws.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(msg), `"type":"admitted"`, "the first update of an admitted ticket")
}

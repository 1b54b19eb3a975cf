package cli

import (
	"bufio"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// serveProc is a `waitroom serve` process of a test, its stderr kept.
type serveProc struct {
	cmd    *exec.Cmd
	exited chan error // gets Wait's result once
	addr   chan string
	mu     sync.Mutex
	log    strings.Builder
}

// startServeProc starts `waitroom serve args` (this test binary, envRunMain) with env added;
// addr gets the API's address from the first log line that names it (the wait for the stores
// or "waitroom serving"). The process is killed at the test's end if it still runs.
func startServeProc(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{cmd: exec.Command(os.Args[0], append([]string{"serve"}, args...)...), exited: make(chan error, 1),
		addr: make(chan string, 1)}
	p.cmd.Env = append(append(os.Environ(), envRunMain+"=1"), env...)
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		select {
		case err := <-p.exited:
			p.exited <- err
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	go func() {
		re := regexp.MustCompile(`(?:waiting for the stores|waitroom serving).*\baddr=(\S+)`)
		sent := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				p.addr <- "http://" + m[1]
				sent = true
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	return p
}

func (p *serveProc) logged() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// base waits for the API's address.
func (p *serveProc) base(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.addr:
		return a
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("serve exited before it listened: %v; log:\n%s", err, p.logged())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not listen within 30 s; log:\n%s", p.logged())
	}
	return ""
}

// exit waits up to d for the process to exit and returns its error.
func (p *serveProc) exit(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(d):
		t.Fatalf("serve did not exit within %v; log:\n%s", d, p.logged())
	}
	return nil
}

// storeProxies are TCP proxies to the test's Redis and PostgreSQL (a fresh database), the env
// of a serve through them, and its admin key.
func storeProxies(t *testing.T) (redis, pg *faultproxy.Proxy, env []string, adminKey string) {
	t.Helper()
	redisURL := cmp.Or(os.Getenv("TEST_REDIS_URL"), redistest.DefaultURL)
	ru, err := url.Parse(redisURL)
	require.NoError(t, err)
	pu, err := url.Parse(sqltest.Postgres(t))
	require.NoError(t, err)
	redis, err = faultproxy.New(ru.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = redis.Close() })
	pg, err = faultproxy.New(pu.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	ru.Host, pu.Host = redis.Addr(), pg.Addr()
	adminKey = base64.StdEncoding.EncodeToString([]byte("wait-test-admin-key-0123456789ab"))
	env = []string{"WAITROOM_REDIS_URL=" + ru.String(), "WAITROOM_DATABASE_URL=" + pu.String(),
		"WAITROOM_REDIS_PREFIX=" + redistest.Prefix(t, redistest.Client(t)),
		"WAITROOM_ADMIN_KEY=" + adminKey, "WAITROOM_TOKEN_KEY=wait-test-token-key-0123456789abcdef"}
	return redis, pg, env, adminKey
}

// problemOf reads a problem+json answer's code and Retry-After.
func problemOf(t *testing.T, res *http.Response) (code, retryAfter string) {
	t.Helper()
	defer res.Body.Close()
	var p struct {
		Code string `json:"code"`
	}
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	return p.Code, res.Header.Get("Retry-After")
}

// TestServeWaitsForTheStores: a scale-out serve started while its Redis and PostgreSQL refuse
// connections does not exit (a supervisor's restart back-off would outlast the stores' return).
// Meanwhile GET and HEAD /healthz answer 200 (a liveness probe keeps it) and /readyz 503
// store_unavailable with Retry-After, each closing its connection; any other request has its
// connection closed unanswered, as a stopped instance's would be refused (a balancer passes
// over it). Once both stores answer it serves on the same address: ready, an event made, a join
// taken. SIGTERM then stops it cleanly.
func TestServeWaitsForTheStores(t *testing.T) {
	redis, pg, env, adminKey := storeProxies(t)
	redis.Cut()
	pg.Cut()
	p := startServeProc(t, env, "--addr", "127.0.0.1:0", "--store-timeout", "1s")
	base := p.base(t)
	client := &http.Client{Timeout: 10 * time.Second}

	for _, method := range []string{"GET", "HEAD"} {
		res, err := client.Do(mustRequest(t, method, base+"/healthz", ""))
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, 200, res.StatusCode, "%s /healthz while waiting: %s", method, body)
		require.True(t, res.Close, "%s /healthz while waiting keeps no connection open", method)
		if method == "GET" {
			require.Contains(t, string(body), `"starting"`)
		}
	}
	res, err := client.Get(base + "/readyz")
	require.NoError(t, err)
	require.Equal(t, 503, res.StatusCode, "/readyz while waiting")
	code, retry := problemOf(t, res)
	require.Equal(t, "store_unavailable", code)
	require.NotEmpty(t, retry, "/readyz: no Retry-After")
	res, err = client.Get(base + "/readyz?exclude=postgres")
	require.NoError(t, err)
	require.Equal(t, 400, res.StatusCode, "a probe's misspelt check, while waiting")
	code, _ = problemOf(t, res)
	require.Equal(t, "invalid_query", code)
	for _, req := range []*http.Request{
		mustRequest(t, "POST", base+"/v1/events/ev/tickets", ""),
		mustRequest(t, "GET", base+"/v1/events/ev", ""),
		mustRequest(t, "POST", base+"/healthz", ""),
	} {
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
		}
		require.Error(t, err, "%s %s while waiting: answered %v, not refused", req.Method, req.URL.Path, res)
	}

	// PostgreSQL back, Redis still away: it goes on waiting, now on Redis.
	require.NoError(t, pg.Restore())
	eventually.True(t, 30*time.Second, "a failed attempt on Redis after PostgreSQL came back", func() bool {
		return strings.Contains(p.logged(), `err="redis:`)
	})
	res, err = client.Get(base + "/readyz")
	require.NoError(t, err)
	code, _ = problemOf(t, res)
	require.Equal(t, "store_unavailable", code)

	require.NoError(t, redis.Restore())
	eventually.True(t, 30*time.Second, "/readyz 200 once both stores answer", func() bool {
		res, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	require.Contains(t, p.logged(), "waitroom serving")
	res, err = client.Do(mustRequest(t, "PUT", base+"/v1/events/ev", `{"max_active":5}`, "Authorization", "Bearer "+adminKey))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 201, res.StatusCode, "create the event")
	res, err = client.Do(mustRequest(t, "POST", base+"/v1/events/ev/tickets", ""))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 201, res.StatusCode, "join once the stores answer")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.exit(t, 30*time.Second), "exit after SIGTERM; log:\n%s", p.logged())
}

// TestServeStopsWhileWaiting: SIGTERM while the stores do not answer ends the wait at once,
// exit 0 (a rollout that gives up on an instance is no failure of it).
func TestServeStopsWhileWaiting(t *testing.T) {
	redis, _, env, _ := storeProxies(t)
	redis.Cut()
	p := startServeProc(t, env, "--addr", "127.0.0.1:0", "--drain", "10s")
	p.base(t)
	eventually.True(t, 30*time.Second, "a failed attempt on Redis", func() bool {
		return strings.Contains(p.logged(), `err="redis:`)
	})
	sent := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.exit(t, 5*time.Second), "exit after SIGTERM while waiting; log:\n%s", p.logged())
	require.Less(t, time.Since(sent), 5*time.Second, "the drain is for an instance that served, not one waiting")
	require.Contains(t, p.logged(), "stopped while waiting for the stores")
}

// TestServeFailsOnAWrongStore: what waiting cannot cure still fails at once: a database that
// does not exist (PostgreSQL 3D000) is no store that is not up yet.
func TestServeFailsOnAWrongStore(t *testing.T) {
	_, _, env, _ := storeProxies(t)
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "WAITROOM_DATABASE_URL="); ok {
			u, err := url.Parse(v)
			require.NoError(t, err)
			u.Path = "/waitroom_no_such_database"
			env[i] = "WAITROOM_DATABASE_URL=" + u.String()
		}
	}
	p := startServeProc(t, env, "--addr", "127.0.0.1:0")
	err := p.exit(t, 30*time.Second)
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee) && ee.ExitCode() != 0, "exit: %v; log:\n%s", err, p.logged())
	require.NotContains(t, p.logged(), "waiting for the stores")
	require.Contains(t, p.logged(), "waitroom_no_such_database")
}

func mustRequest(t *testing.T, method, url, body string, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// TestReadyzExclude: /readyz checks PostgreSQL and Redis, and ?exclude=database and
// ?exclude=redis (Kubernetes' parameter) leave each out: with PostgreSQL cut, /readyz fails
// while /readyz?exclude=database stays ready, and a waiting ticket's poll and a leave are still
// answered (what the Helm chart's probe relies on: a shared database's outage does not take every pod
// out of the Service); with Redis cut too, only excluding both stays ready. An unknown name or
// parameter is refused.
func TestReadyzExclude(t *testing.T) {
	redis, pg, env, adminKey := storeProxies(t)
	p := startServeProc(t, env, "--addr", "127.0.0.1:0")
	base := p.base(t)
	client := &http.Client{Timeout: 10 * time.Second}
	status := func(path string) int {
		t.Helper()
		res, err := client.Get(base + path)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	eventually.True(t, 30*time.Second, "ready", func() bool { return status("/readyz") == 200 })
	res, err := client.Do(mustRequest(t, "PUT", base+"/v1/events/ev", `{"max_active":1}`, "Authorization", "Bearer "+adminKey))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 201, res.StatusCode)
	var tickets []string
	for range 2 {
		res, err := client.Do(mustRequest(t, "POST", base+"/v1/events/ev/tickets", ""))
		require.NoError(t, err)
		var tk struct {
			TicketID string `json:"ticket_id"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&tk))
		res.Body.Close()
		require.Equal(t, 201, res.StatusCode)
		tickets = append(tickets, tk.TicketID)
	}
	for _, bad := range []string{"/readyz?exclude=postgres", "/readyz?exclude=", "/readyz?verbose=1", "/readyz?exclude=%zz"} {
		res, err := client.Get(base + bad)
		require.NoError(t, err)
		require.Equal(t, 400, res.StatusCode, bad)
		code, _ := problemOf(t, res)
		require.Equal(t, "invalid_query", code, bad)
	}

	pg.Cut()
	require.Equal(t, 503, status("/readyz"), "PostgreSQL cut")
	require.Equal(t, 200, status("/readyz?exclude=database"), "PostgreSQL cut, left out")
	require.Equal(t, 200, status("/v1/events/ev/tickets/"+tickets[1]), "a waiting ticket's poll needs no PostgreSQL")
	res, err = client.Do(mustRequest(t, "DELETE", base+"/v1/events/ev/tickets/"+tickets[0], ""))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 204, res.StatusCode, "a leave with PostgreSQL cut")
	redis.Cut()
	require.Equal(t, 503, status("/readyz?exclude=database"), "Redis cut too")
	require.Equal(t, 503, status("/readyz?exclude=redis"), "Redis cut too, PostgreSQL checked")
	require.Equal(t, 200, status("/readyz?exclude=database&exclude=redis"), "both cut, both left out")
	require.NoError(t, redis.Restore())
	require.NoError(t, pg.Restore())
	eventually.True(t, 30*time.Second, "ready again", func() bool { return status("/readyz") == 200 })
	// Admissions paused without PostgreSQL (a step reserves its serving ceiling there first:
	// docs/durability.md); with it back the line moves: the waiting ticket is admitted.
	eventually.True(t, 30*time.Second, "the waiting ticket admitted once the stores are back", func() bool {
		res, err := client.Get(base + "/v1/events/ev/tickets/" + tickets[1])
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var tk struct {
			Status string `json:"status"`
		}
		return res.StatusCode == 200 && json.NewDecoder(res.Body).Decode(&tk) == nil && tk.Status == "ADMITTED"
	})
}

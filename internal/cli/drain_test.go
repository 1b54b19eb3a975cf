package cli

import (
	"bufio"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/waitroom/waitroom/internal/syncbuf"
)

// TestServeDrainsOnSIGTERM: a `waitroom serve` process gets SIGTERM while a request waits on a
// slow PostgreSQL (a proxy delays every packet 1.5 s). /readyz answers 503 at once, the slow
// request still completes (200) after the drain, and the process exits 0.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	redisURL := os.Getenv("TEST_REDIS_URL")
	if redisURL == "" {
		redisURL = redistest.DefaultURL
	}
	u, err := url.Parse(sqltest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	pg, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	u.Host = pg.Addr()
	adminKey := base64.StdEncoding.EncodeToString([]byte("drain-test-admin-key-0123456789ab"))
	const drain = time.Second
	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--store-timeout", "20s",
		"--drain", drain.String(), "--shutdown-grace", "25s")
	cmd.Env = append(os.Environ(), envRunMain+"=1",
		"WAITROOM_REDIS_URL="+redisURL, "WAITROOM_DATABASE_URL="+u.String(),
		"WAITROOM_REDIS_PREFIX="+redistest.Prefix(t, redistest.Client(t)),
		"WAITROOM_ADMIN_KEY="+adminKey, "WAITROOM_TOKEN_KEY=drain-test-token-key-0123456789abcdef")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	addr := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		re := regexp.MustCompile(`waitroom serving" addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- "http://" + m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	var base string
	select {
	case base = <-addr:
	case err := <-exited:
		exited <- err
		t.Fatalf("serve exited before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve not serving within 30 s")
	}
	client := &http.Client{Timeout: 40 * time.Second}
	req, _ := http.NewRequest("PUT", base+"/v1/events/slow", strings.NewReader(`{"max_active":5,"capacity":10}`))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := client.Do(req)
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("create the event: %v %v", res, err)
	}
	res.Body.Close()

	// A request that reads the database (the event's sold count) while it is slow.
	pg.SetDelay(1500 * time.Millisecond)
	wrote := make(chan struct{})
	type answer struct {
		code int
		took time.Duration
		err  error
	}
	slow := make(chan answer, 1)
	go func() {
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }}
		req, _ := http.NewRequest("GET", base+"/v1/events/slow", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		start := time.Now()
		res, err := client.Do(req)
		a := answer{err: err, took: time.Since(start)}
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			a.code = res.StatusCode
		}
		slow <- a
	}()
	<-wrote
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()

	// /readyz fails at once (it does not wait on the slow database while draining).
	for {
		res, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("readyz during the drain: %v", err)
		}
		res.Body.Close()
		if res.StatusCode == 503 {
			break
		}
		if time.Since(sent) > 500*time.Millisecond {
			t.Fatalf("readyz still %d %v after SIGTERM", res.StatusCode, time.Since(sent))
		}
	}
	if d := time.Since(sent); d > 500*time.Millisecond {
		t.Fatalf("readyz took %v to fail", d)
	}
	a := <-slow
	if a.err != nil || a.code != 200 {
		t.Fatalf("the slow request in flight: %d %v", a.code, a.err)
	}
	if a.took < drain {
		t.Fatalf("the request took %v, less than the drain: it did not test the shutdown", a.took)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			logMu.Lock()
			defer logMu.Unlock()
			t.Fatalf("serve exited with %v; log:\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30 s of SIGTERM")
	}
	t.Logf("the slow request took %v; the process exited %v after SIGTERM", a.took, time.Since(sent))
}

func TestServeBoundsFlags(t *testing.T) {
	c, err := parseServe(nil, io.Discard, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.storeTimeout != 2*time.Second || c.drain != 5*time.Second || c.shutdownGrace != 25*time.Second {
		t.Fatalf("defaults: store %v drain %v grace %v", c.storeTimeout, c.drain, c.shutdownGrace)
	}
	c, err = parseServe([]string{"--drain", "0", "--shutdown-grace", "1m"}, io.Discard, io.Discard,
		env(map[string]string{"WAITROOM_STORE_TIMEOUT": "500ms"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.storeTimeout != 500*time.Millisecond || c.drain >= 0 || c.shutdownGrace != time.Minute {
		t.Fatalf("store %v drain %v grace %v; want 500ms, none (<0), 1m", c.storeTimeout, c.drain, c.shutdownGrace)
	}
	for _, args := range [][]string{{"--store-timeout", "0"}, {"--drain", "-1s"}, {"--shutdown-grace", "soon"}} {
		if _, err := parseServe(args, io.Discard, io.Discard, env(nil)); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestLowOpenFileLimitWarns: an instance started with a distribution's default of 1,024 open
// files (512 connections, 419 of them push) says so at start, where an operator looks; so does
// one whose --max-conns is more than the limit leaves for connections; and one whose
// environment holds a WAITROOM_ variable it does not read (a misspelt setting) names it.
func TestLowOpenFileLimitWarns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Max < 1024 {
		t.Skipf("the hard open-file limit (%d, %v) is under the 1,024 this test sets", rl.Max, err)
	}
	misspelt := "WAITROOM_" + "SHUTDOWN_TIMEOUT" // WAITROOM_SHUTDOWN_GRACE's, misspelt
	var env []string                             // more of serve's environment
	serve := func(extra ...string) string {
		t.Helper()
		args := append([]string{"-c", `ulimit -n 1024 && exec "$0" "$@"`, os.Args[0],
			"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "waitroom.db")}, extra...)
		cmd := exec.Command("sh", args...)
		cmd.Env = append(append(os.Environ(), envRunMain+"=1", "WAITROOM_ADMIN_KEY=low-file-limit-admin-key-0123456789"), env...)
		var log syncbuf.Buffer
		cmd.Stderr = &log
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		eventually.True(t, 30*time.Second, "serving", func() bool { return strings.Contains(log.String(), "waitroom serving") })
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("serve did not stop within 20 s of SIGINT")
		}
		return log.String()
	}
	log := serve()
	require.Contains(t, log, "the open-file limit caps this instance's connections")
	require.Contains(t, log, "open_file_limit=1024 max_conns=512")
	require.NotContains(t, log, misspelt)
	env = []string{misspelt + "=60s"}
	log = serve("--max-conns", "5000")
	require.Regexp(t, `environment variables that serve does not read .*names=\S*`+misspelt, log)
	require.Contains(t, log, "--max-conns is more than the open-file limit leaves for connections")
	require.Contains(t, log, "open_file_limit=1024 max_conns=5000 max_conns_for_limit=512")
	require.NotContains(t, serve("--max-conns", "300"), "open-file limit", "a --max-conns within the limit is the operator's choice")
}

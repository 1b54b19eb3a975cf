package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// httpConns is the number of keep-alive connections the load generator keeps busy.
const httpConns = 64

// process is a child process started by the bench (an instance, or the bare server).
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	base string // http://addr
}

// startProcess starts exe with args and env, logging to a temporary file, and waits until
// GET base+ready answers 2xx.
func (e *env) startProcess(ctx context.Context, name, exe string, args, extraEnv []string, ready string) (*process, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args = append(args, "--addr", addr)
	log, err := os.CreateTemp("", "waitroom-bench-"+name+"-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = log, log
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WAITROOM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{}), base: "http://" + addr}
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+ready, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				e.progress("%s ready at %s (pid %d, log %s)", name, p.base, cmd.Process.Pid, log.Name())
				return p, nil
			}
		}
		select {
		case <-p.done:
			err := fmt.Errorf("%s exited at start: %s", name, p.tail())
			p.stop() // removes the log
			return nil, err
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("%s not ready within 60 s: %s", name, p.tail())
			p.stop()
			return nil, err
		}
	}
}

// tail returns the end of the process's log.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// stop sends SIGTERM, waits up to 15 s, then kills; the log is removed.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
	_ = os.Remove(p.log.Name())
}

// cpu returns the CPU time the process has used (user and system, /proc/PID/stat, in clock
// ticks of 10 ms: USER_HZ is 100 on Linux).
func (p *process) cpu() (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name (in parentheses, which may hold spaces): state is the
	// 3rd field of the line, utime the 14th and stime the 15th.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, errors.New("unexpected /proc/PID/stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// rss returns the process's resident set size in bytes (/proc/PID/status VmRSS).
func (p *process) rss() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// instance is a running `waitroom serve` on the run's Redis prefix and database.
type instance struct {
	*process
	adminKey string
}

func (e *env) exe() (string, error) {
	if e.cfg.Executable != "" {
		return e.cfg.Executable, nil
	}
	return os.Executable()
}

// startInstance starts `waitroom serve` on Redis (the run's key prefix) and PostgreSQL (the
// run's database).
func (e *env) startInstance(ctx context.Context) (*instance, error) {
	db, err := e.database(ctx)
	if err != nil {
		return nil, err
	}
	exe, err := e.exe()
	if err != nil {
		return nil, err
	}
	if e.adminKey == "" {
		e.adminKey, e.tokenKey = randomKey(), randomKey()
	}
	p, err := e.startProcess(ctx, "waitroom-serve", exe,
		// Without the access log: the target measures the service, not its stderr. The load
		// comes from one address: its cap of connections is lifted as the events' limits are
		// (the push target holds thousands of WebSockets from it).
		[]string{"serve", "--redis", e.cfg.RedisURL, "--database", db, "--redis-prefix", e.prefix, "--access-log=false",
			"--max-conns-per-client", "1000000000"},
		[]string{"WAITROOM_ADMIN_KEY=" + e.adminKey, "WAITROOM_TOKEN_KEY=" + e.tokenKey}, "/readyz")
	if err != nil {
		return nil, err
	}
	return &instance{process: p, adminKey: e.adminKey}, nil
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// putEvent creates an event through the API (admin key).
func (in *instance) putEvent(ctx context.Context, id string, maxActive int64) error {
	// The load comes from one address: the limits per client are lifted, not switched off
	// (every join still counts against joins_per_client inside join.lua).
	return in.putEventJSON(ctx, id, fmt.Sprintf(`{"name":"bench","max_active":%d,"limits":{"joins_per_client":1000000000,"push_per_client":1000000000}}`, maxActive))
}

// putEventJSON creates an event through the API (admin key) with the JSON body.
func (in *instance) putEventJSON(ctx context.Context, id, body string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, in.base+"/v1/events/"+id, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+in.adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("PUT /v1/events/%s: %d %s", id, resp.StatusCode, b)
	}
	return nil
}

// joinedTicket is the part of a join's answer the bench uses.
type joinedTicket struct {
	TicketID string `json:"ticket_id"`
	Number   int64  `json:"number"`
	Status   string `json:"status"`
	Position int64  `json:"position"`
}

// join makes one anonymous join and returns the ticket and the size of the answer's body.
func (in *instance) join(ctx context.Context, c *http.Client, event string) (joinedTicket, int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, in.base+"/v1/events/"+event+"/tickets", nil)
	resp, err := c.Do(req)
	if err != nil {
		return joinedTicket{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return joinedTicket{}, 0, err
	}
	if resp.StatusCode != http.StatusCreated {
		return joinedTicket{}, 0, fmt.Errorf("join: %d %s", resp.StatusCode, b)
	}
	var t joinedTicket
	err = json.Unmarshal(b, &t)
	return t, len(b), err
}

// ServeBare serves a bare net/http handler on addr until ctx ends: every request is answered
// with the same JSON body of bodyBytes bytes and the headers a ticket answer carries. It is
// the baseline of the HTTP target (`waitroom bench --serve-bare --addr ADDR`).
func ServeBare(ctx context.Context, addr string, bodyBytes int) error {
	body := []byte(`{"ticket_id":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","pad":""}`)
	if pad := bodyBytes - len(body); pad > 0 {
		body = append(body[:len(body)-2], append(bytes.Repeat([]byte("x"), pad), '"', '}')...)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute) // never outlives a forgotten run
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loadResult is one HTTP measurement.
type loadResult struct {
	rate     float64
	p50, p99 time.Duration
	errors   int64
	// answered counts every 2xx answer, those of the warmup included (for costs per request
	// measured over the whole call).
	answered int64
}

// newLoadClient returns a client keeping up to conns keep-alive connections to one host.
func newLoadClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}, Timeout: 30 * time.Second}
}

// httpLoad sends method url from conns workers, one request in flight each, for warmup (not
// counted), then for d, and returns the rate of 2xx answers and their latency quantiles.
func httpLoad(ctx context.Context, c *http.Client, method, url string, conns int, warmup, d time.Duration) (loadResult, error) {
	return httpLoadBodies(ctx, c, method, url, conns, warmup, d, nil)
}

// httpLoadBodies is httpLoad with a JSON body per request from body (nil: no body). Each
// worker reuses its one request, with the body swapped in, so that a request costs the load
// generator no more than without a body; a nil body from it counts as an error and ends that
// worker.
func httpLoadBodies(ctx context.Context, c *http.Client, method, url string, conns int, warmup, d time.Duration, body func() []byte) (loadResult, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 2)
		errs     int64
		answered int64
		lastErr  error
	)
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(d)
	ctx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second))
	defer cancel()
	for range conns {
		wg.Go(func() {
			h := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 2)
			var myErrs, myOK int64
			var myErr error
			req, _ := http.NewRequestWithContext(ctx, method, url, nil)
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			for {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				if body != nil {
					b := body()
					if b == nil {
						myErrs++
						myErr = errNoBody
						break
					}
					req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
				}
				resp, err := c.Do(req)
				ok := err == nil && resp.StatusCode/100 == 2
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if !ok {
						err = fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
					}
				}
				t1 := time.Now()
				if ok {
					myOK++
				}
				if t0.Before(measureFrom) {
					continue
				}
				if ok {
					_ = h.RecordValue(max(1, t1.Sub(t0).Microseconds()))
				} else {
					myErrs++
					myErr = err
				}
			}
			mu.Lock()
			all.Merge(h)
			errs += myErrs
			answered += myOK
			if myErr != nil {
				lastErr = myErr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if all.TotalCount() == 0 {
		if lastErr == nil {
			lastErr = errors.New("no request completed")
		}
		return loadResult{}, lastErr
	}
	return loadResult{
		rate:     float64(all.TotalCount()) / d.Seconds(),
		p50:      time.Duration(all.ValueAtQuantile(50)) * time.Microsecond,
		p99:      time.Duration(all.ValueAtQuantile(99)) * time.Microsecond,
		errors:   errs,
		answered: answered,
	}, nil
}

// httpTargets: HTTP joins end to end on a `waitroom serve` against a bare net/http handler
// answering a body of the same size, with the same generator, in interleaved rounds.
func (e *env) httpTargets(ctx context.Context, rep *Report) {
	const ev = "http"
	in, err := e.startInstance(ctx)
	if err != nil {
		rep.fail("http/join", err)
		return
	}
	defer in.stop()
	if err := in.putEvent(ctx, ev, 1); err != nil {
		rep.fail("http/join", err)
		return
	}
	c := newLoadClient(httpConns)
	defer c.CloseIdleConnections()
	_, size, err := in.join(ctx, c, ev) // ticket 1 takes the slot; every join after it queues
	if err == nil {
		_, size, err = in.join(ctx, c, ev)
	}
	if err != nil {
		rep.fail("http/join", err)
		return
	}
	exe, err := e.exe()
	if err != nil {
		rep.fail("http/join", err)
		return
	}
	bare, err := e.startProcess(ctx, "bare-http", exe, []string{"bench", "--bare-body-bytes", strconv.Itoa(size), "--serve-bare"}, nil, "/")
	if err != nil {
		rep.fail("http/join", err)
		return
	}
	defer bare.stop()
	joinURL := in.base + "/v1/events/" + ev + "/tickets"
	var wr, br []float64
	var wres, bres []loadResult
	for round := range e.cfg.Rounds {
		for i := range 2 {
			if (i+round)%2 == 0 {
				r, err := httpLoad(ctx, c, http.MethodPost, bare.base+"/v1/events/"+ev+"/tickets", httpConns, time.Second, e.cfg.HTTPDuration)
				if err != nil {
					rep.fail("http/join", fmt.Errorf("bare handler: %w", err))
					return
				}
				br, bres = append(br, r.rate), append(bres, r)
				e.progress("round %d: bare net/http: %.0f/s, p50 %s, p99 %s", round+1, r.rate, r.p50, r.p99)
			} else {
				r, err := httpLoad(ctx, c, http.MethodPost, joinURL, httpConns, time.Second, e.cfg.HTTPDuration)
				if err != nil {
					rep.fail("http/join", fmt.Errorf("waitroom serve: %w", err))
					return
				}
				wr, wres = append(wr, r.rate), append(wres, r)
				e.progress("round %d: waitroom joins: %.0f/s, p50 %s, p99 %s, %d errors", round+1, r.rate, r.p50, r.p99, r.errors)
			}
		}
	}
	var errs int64
	for _, r := range wres {
		errs += r.errors
	}
	ratio := median(wr) / median(br)
	rep.add("http/join", holds(ratio >= 0.35 && errs == 0),
		"waitroom serve on Redis, POST /v1/events/{id}/tickets: %s joins/s, p99 %s (rounds %s; %d errors) vs bare net/http, same %d-byte JSON: %s/s, p99 %s (rounds %s); %d keep-alive connections, %s a round = %.2f (target >= 0.35)",
		thousands(median(wr)), p99Of(wres), rates(wr), errs, size, thousands(median(br)), p99Of(bres), rates(br), httpConns, e.cfg.HTTPDuration, ratio)
}

// p99Of is the median of the rounds' p99 latencies.
func p99Of(rs []loadResult) time.Duration {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = float64(r.p99)
	}
	return time.Duration(median(xs)).Round(10 * time.Microsecond)
}

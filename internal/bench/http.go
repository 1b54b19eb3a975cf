package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// selfCPU is the CPU time this process has used (user and system; 0 when unreadable).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU is the first line of /proc/stat: the machine's CPU time in clock ticks, all of it
// and idle (idle and iowait).
type machineCPU struct{ total, idle int64 }

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var m machineCPU
	for i, v := range f[min(1, len(f)):] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest and guest_nice are counted in user and nice already
			break
		}
		m.total += n
		if i == 3 || i == 4 {
			m.idle += n
		}
	}
	return m
}

// idleSince is the idle share of the machine's CPU time from m0 to m (0 to 1).
func (m machineCPU) idleSince(m0 machineCPU) float64 {
	if m.total <= m0.total {
		return 0
	}
	return float64(m.idle-m0.idle) / float64(m.total-m0.total)
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
	return e.startServe(ctx, "waitroom-serve", exe, []string{"--redis", e.cfg.RedisURL, "--database", db, "--redis-prefix", e.prefix})
}

// startServe starts `exe serve` with the backend's flags (Redis and PostgreSQL, or an
// embedded line and its SQLite file) and the run's keys.
func (e *env) startServe(ctx context.Context, name, exe string, backend []string) (*instance, error) {
	if e.adminKey == "" {
		e.adminKey, e.tokenKey = randomKey(), randomKey()
	}
	p, err := e.startProcess(ctx, name, exe,
		// Without the access log: the target measures the service, not its stderr. The load
		// comes from one address: its cap of connections is lifted as the events' limits are
		// (the push target holds thousands of WebSockets from it).
		append(append([]string{"serve"}, backend...), "--access-log=false", "--max-conns-per-client", "1000000000"),
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
	return httpLoadFunc(ctx, c, method, url, nil, conns, warmup, d, body)
}

// httpLoadFunc is httpLoadBodies with, when next is not nil, each request's URL from next
// (a poll of a random ticket; url is then unused).
func httpLoadFunc(ctx context.Context, c *http.Client, method, url string, next func() string, conns int, warmup, d time.Duration, body func() []byte) (loadResult, error) {
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
				if next != nil {
					req, _ = http.NewRequestWithContext(ctx, method, next(), nil)
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

// httpServer is one server of the http group: a `waitroom serve` measured on joins and on
// polls of waiting tickets, with its CPU (and Redis's, for one on Redis) per answer.
type httpServer struct {
	label string // "on Redis", "embedded", "--compare"
	in    *instance
	redis bool     // on the run's Redis: Redis's CPU is its too
	polls []string // URLs of waiting tickets' status
	join  httpSide
	poll  httpSide
}

// httpSide is one kind of request's measurements of a server, one per round.
type httpSide struct {
	rates       []float64
	res         []loadResult
	inst, redis []time.Duration // CPU per answer of the instance, and of Redis
}

func (h *httpSide) add(r loadResult, inst, redis time.Duration) {
	h.rates, h.res = append(h.rates, r.rate), append(h.res, r)
	h.inst, h.redis = append(h.inst, inst), append(h.redis, redis)
}

func (h *httpSide) errors() int64 {
	var n int64
	for _, r := range h.res {
		n += r.errors
	}
	return n
}

// cpu says the median CPU per answer: "12.3µs instance + 4.5µs Redis" (or the instance's alone).
func (h *httpSide) cpu(redis bool) string {
	s := medianDuration(h.inst).String() + " instance"
	if redis {
		s += " + " + medianDuration(h.redis).String() + " Redis"
	}
	return s
}

// httpPollTickets is how many waiting tickets of each server the poll load reads (at random).
const httpPollTickets = 20_000

// httpEventJSON is the event of the http group: one slot (ticket 1 takes it; every later one
// waits), the limits per client and per ticket lifted since the load comes from one address
// and reads a few tickets many times.
const httpEventJSON = `{"name":"bench","max_active":1,"limits":{"joins_per_client":1000000000,"push_per_client":1000000000,"polls_per_ticket":1000000000}}`

// httpTargets: HTTP joins and status polls end to end on a `waitroom serve` on Redis against a
// bare net/http handler answering a body of the same size, with the same generator, in
// interleaved rounds; beside them the same on an embedded instance, and on the --compare
// binary (on Redis) when given, each with its CPU per request.
func (e *env) httpTargets(ctx context.Context, rep *Report) {
	const ev = "http"
	fail := func(err error) {
		rep.fail("http/join", err)
		rep.fail("http/poll", err)
	}
	exe, err := e.exe()
	if err != nil {
		fail(err)
		return
	}
	var servers []*httpServer
	defer func() {
		for _, s := range servers {
			s.in.stop()
		}
	}()
	in, err := e.startInstance(ctx)
	if err != nil {
		fail(err)
		return
	}
	servers = append(servers, &httpServer{label: "on Redis", in: in, redis: true})
	dir, err := os.MkdirTemp("", "waitroom-bench-embedded-")
	if err != nil {
		fail(err)
		return
	}
	defer os.RemoveAll(dir)
	emb, err := e.startServe(ctx, "waitroom-embedded", exe, []string{"--data", filepath.Join(dir, "bench.db")})
	if err != nil {
		fail(err)
		return
	}
	servers = append(servers, &httpServer{label: "embedded", in: emb})
	if e.cfg.Compare != "" {
		name, db, err := e.newDatabase(ctx)
		if err != nil {
			fail(err)
			return
		}
		e.extraDBs = append(e.extraDBs, name)
		old, err := e.startServe(ctx, "waitroom-compare", e.cfg.Compare,
			[]string{"--redis", e.cfg.RedisURL, "--database", db, "--redis-prefix", e.prefix + "cmp:"})
		if err != nil {
			fail(fmt.Errorf("--compare %s: %w", e.cfg.Compare, err))
			return
		}
		servers = append(servers, &httpServer{label: "--compare", in: old, redis: true})
	}
	c := newLoadClient(httpConns)
	defer c.CloseIdleConnections()
	size := 0
	for _, s := range servers {
		if err := s.in.putEventJSON(ctx, ev, httpEventJSON); err != nil {
			fail(err)
			return
		}
		// Ticket 1 takes the slot (its answer carries the admission token); ticket 2 waits,
		// as every join of the measurement does, so the bare handler answers its size; the
		// next httpPollTickets wait too, and are the ones polled.
		var n int
		if _, _, err = s.in.join(ctx, c, ev); err == nil {
			if _, n, err = s.in.join(ctx, c, ev); err == nil {
				if s == servers[0] {
					size = n
				}
				s.polls, err = s.in.joinMany(ctx, c, ev, httpPollTickets)
			}
		}
		if err != nil {
			fail(fmt.Errorf("%s: %w", s.label, err))
			return
		}
	}
	bare, err := e.startProcess(ctx, "bare-http", exe, []string{"bench", "--bare-body-bytes", strconv.Itoa(size), "--serve-bare"}, nil, "/")
	if err != nil {
		fail(err)
		return
	}
	defer bare.stop()
	random := func(urls []string) func() string {
		var mu sync.Mutex
		r := mrand.New(mrand.NewPCG(1, 2))
		return func() string {
			mu.Lock()
			defer mu.Unlock()
			return urls[r.IntN(len(urls))]
		}
	}
	barePolls := make([]string, 1024)
	for i := range barePolls {
		barePolls[i] = bare.base + "/v1/events/" + ev + "/tickets/" + strings.Repeat("A", 38)
	}
	// One measurement: a load and what it costs the process (and Redis).
	type step struct {
		what string
		run  func() error
	}
	var bareJoin, barePoll httpSide
	measure := func(s *httpServer, side *httpSide, what string, load func() (loadResult, error)) error {
		var i0, i1, r0, r1 time.Duration
		var err1, err2, err3, err4 error
		srv := bare.cpu
		if s != nil {
			srv = s.in.cpu
		}
		i0, err1 = srv()
		if s != nil && s.redis {
			r0, err2 = e.redisCPU(ctx)
		}
		g0, m0 := selfCPU(), readMachineCPU()
		r, err := load()
		g1, m1 := selfCPU(), readMachineCPU()
		i1, err3 = srv()
		if s != nil && s.redis {
			r1, err4 = e.redisCPU(ctx)
		}
		if err := errors.Join(err, err1, err2, err3, err4); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		n := time.Duration(max(r.answered, 1))
		side.add(r, (i1-i0)/n, (r1-r0)/n)
		// The load generator (this process) and the machine's idle share over the call tell a
		// server that bounds the rate by its CPU from one that leaves the CPUs idle waiting.
		e.progress("  %s: %.0f/s, p50 %s, p99 %s, %d errors; CPU per answer %s server, %s Redis, %s load generator; machine %.0f%% idle",
			what, r.rate, r.p50, r.p99, r.errors,
			((i1 - i0) / n).Round(100*time.Nanosecond), ((r1 - r0) / n).Round(100*time.Nanosecond),
			((g1 - g0) / n).Round(100*time.Nanosecond), m1.idleSince(m0)*100)
		return nil
	}
	var steps []step
	steps = append(steps,
		step{"bare net/http, POST", func() error {
			return measure(nil, &bareJoin, "bare net/http, POST", func() (loadResult, error) {
				return httpLoad(ctx, c, http.MethodPost, bare.base+"/v1/events/"+ev+"/tickets", httpConns, time.Second, e.cfg.HTTPDuration)
			})
		}},
		step{"bare net/http, GET", func() error {
			return measure(nil, &barePoll, "bare net/http, GET", func() (loadResult, error) {
				return httpLoadFunc(ctx, c, http.MethodGet, "", random(barePolls), httpConns, time.Second, e.cfg.HTTPDuration, nil)
			})
		}})
	for _, s := range servers {
		steps = append(steps,
			step{"joins " + s.label, func() error {
				return measure(s, &s.join, "joins "+s.label, func() (loadResult, error) {
					return httpLoad(ctx, c, http.MethodPost, s.in.base+"/v1/events/"+ev+"/tickets", httpConns, time.Second, e.cfg.HTTPDuration)
				})
			}},
			step{"polls " + s.label, func() error {
				return measure(s, &s.poll, "polls "+s.label, func() (loadResult, error) {
					return httpLoadFunc(ctx, c, http.MethodGet, "", random(s.polls), httpConns, time.Second, e.cfg.HTTPDuration, nil)
				})
			}})
	}
	for round := range e.cfg.Rounds {
		e.progress("round %d", round+1)
		for i := range steps {
			st := steps[(i+round)%len(steps)] // the order rotates every round
			if err := st.run(); err != nil {
				fail(err)
				return
			}
		}
	}
	srv := servers[0]
	var others []string
	line := func(get func(*httpServer) *httpSide, base *httpSide) string {
		others = others[:0]
		for _, s := range servers[1:] {
			side := get(s)
			o := fmt.Sprintf("%s: %s/s (rounds %s) = %.2f of bare, CPU per request %s",
				s.label, thousands(median(side.rates)), rates(side.rates), median(side.rates)/median(base.rates), side.cpu(s.redis))
			if s.label == "--compare" {
				o += ", " + paired(get(srv), side)
			}
			others = append(others, o)
		}
		return strings.Join(others, "; ")
	}
	jr := median(srv.join.rates) / median(bareJoin.rates)
	rep.add("http/join", holds(jr >= 0.70 && srv.join.errors() == 0),
		"waitroom serve on Redis, POST /v1/events/{id}/tickets: %s joins/s, p99 %s (rounds %s; %d errors), CPU per join %s vs bare net/http, same %d-byte JSON: %s/s, p99 %s (rounds %s); %s; %d keep-alive connections, %s a round = %.2f (target >= 0.70)",
		thousands(median(srv.join.rates)), p99Of(srv.join.res), rates(srv.join.rates), srv.join.errors(), srv.join.cpu(true),
		size, thousands(median(bareJoin.rates)), p99Of(bareJoin.res), rates(bareJoin.rates), line(func(s *httpServer) *httpSide { return &s.join }, &bareJoin),
		httpConns, e.cfg.HTTPDuration, jr)
	pr := median(srv.poll.rates) / median(barePoll.rates)
	rep.add("http/poll", holds(pr >= 0.70 && srv.poll.errors() == 0),
		"waitroom serve on Redis, GET /v1/events/{id}/tickets/{ticket_id} of a random one of %s waiting tickets (from place 2 on, joins behind them): %s polls/s, p99 %s (rounds %s; %d errors), CPU per poll %s vs bare net/http GET: %s/s, p99 %s (rounds %s); %s = %.2f (target >= 0.70)",
		thousands(httpPollTickets), thousands(median(srv.poll.rates)), p99Of(srv.poll.res), rates(srv.poll.rates), srv.poll.errors(), srv.poll.cpu(true),
		thousands(median(barePoll.rates)), p99Of(barePoll.res), rates(barePoll.rates), line(func(s *httpServer) *httpSide { return &s.poll }, &barePoll), pr)
}

// joinMany makes n anonymous joins of event from httpConns workers and returns the URLs of
// their tickets' status.
func (in *instance) joinMany(ctx context.Context, c *http.Client, event string, n int) ([]string, error) {
	out := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range httpConns {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t, _, err := in.join(ctx, c, event)
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
				out[i] = in.base + "/v1/events/" + event + "/tickets/" + t.TicketID
			}
		})
	}
	wg.Wait()
	return out, first
}

// paired compares this build's side a with the --compare binary's side b round by round (the
// two ran in the same round, minutes apart at most: the machine's drift between rounds, which
// moves the medians by more than a change of a few percent, cancels out): the medians of the
// rounds' ratios of a's CPU per answer (instance, Redis) and rate to b's.
func paired(a, b *httpSide) string {
	ratios := func(x, y []float64) (med float64, rounds string) {
		rs := make([]float64, min(len(x), len(y)))
		parts := make([]string, len(rs))
		for i := range rs {
			rs[i] = x[i] / y[i]
			parts[i] = fmt.Sprintf("%.2f", rs[i])
		}
		return median(rs), strings.Join(parts, ", ")
	}
	durs := func(ds []time.Duration) []float64 {
		xs := make([]float64, len(ds))
		for i, d := range ds {
			xs[i] = float64(d)
		}
		return xs
	}
	ci, cir := ratios(durs(a.inst), durs(b.inst))
	cr, crr := ratios(durs(a.redis), durs(b.redis))
	rr, rrr := ratios(a.rates, b.rates)
	return fmt.Sprintf("this build against it round by round: CPU per request x%.2f instance (rounds %s), x%.2f Redis (rounds %s), rate x%.2f (rounds %s)",
		ci, cir, cr, crr, rr, rrr)
}

// p99Of is the median of the rounds' p99 latencies.
func p99Of(rs []loadResult) time.Duration {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = float64(r.p99)
	}
	return time.Duration(median(xs)).Round(10 * time.Microsecond)
}

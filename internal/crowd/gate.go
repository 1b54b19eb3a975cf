package crowd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// GateConfig is crowd's gate mode (--gate): visitors who know nothing of the waiting room
// request a protected path of a site through the gate (package gateway), wait as its 503
// answers say (Retry-After), and once let through make Requests requests to the origin, the
// last one to /done (an origin that answers it with "Waitroom-Command: complete" ends the
// session, as internal/originsim does), each ThinkTime after the previous answer.
type GateConfig struct {
	// Targets are the gates' base URLs (round-robin per visitor).
	Targets []string
	// Path is the protected path requested (default /shop).
	Path string
	// Users is how many visitors come; Rate how many start per second (0: all at once).
	Users int
	Rate  float64
	// Requests is each admitted visitor's requests to the origin (default 10), ThinkTime the
	// pause after each answer (default 400 ms).
	Requests  int
	ThinkTime time.Duration
	// PollScale multiplies Retry-After (default 1; at least 100 ms).
	PollScale float64
	// Deadline ends the run (default 10 min); ctx's end stops it too.
	Deadline time.Duration
	// RequestTimeout bounds each request (default 30 s).
	RequestTimeout time.Duration
	// MaxConnsPerTarget caps the connections to each gate (0: no cap); requests beyond wait
	// for one. Thousands of visitors waiting in line from one process otherwise open a
	// connection per poll in flight, and one address past a gate's max_conns_per_client (1,000
	// by default) has its connections shed or refused, failures that are the harness's, not the
	// gate's.
	MaxConnsPerTarget int
	// UserAddrs is the range of the visitors' source addresses (--user-addrs): visitor i
	// binds address i mod its size, so that the gate tells them apart as clients (its limits
	// per client); the zero Prefix: the system's one address for all. MaxConnsPerTarget then
	// caps each address's connections.
	UserAddrs netip.Prefix
	// InsideFile, when set, is a file of insideSize bytes (RunGateProcs creates one) mapped
	// shared by the crowd's processes: their visitors inside are counted there together, and
	// MaxInside is the crowd's most at one moment, not an upper bound.
	InsideFile string
}

// GateReport is what the visitors saw.
type GateReport struct {
	Users    int `json:"users"`
	Admitted int `json:"admitted"` // let through to the origin
	Done     int `json:"done"`     // made all their requests
	// OriginRequests and OriginErrors count the admitted visitors' requests and the 5xx (or
	// failed) ones among them.
	OriginRequests int64 `json:"origin_requests"`
	OriginErrors   int64 `json:"origin_errors"`
	// FIFOViolations counts waiting answers of a number below one already let through when
	// the request was sent (serving passed it: it should have been admitted).
	FIFOViolations int64 `json:"fifo_violations"`
	// Renumbered counts visitors whose ticket number changed while they waited (a lost place).
	Renumbered int64 `json:"renumbered"`
	// MaxInside is the most visitors at once between the answer that let them through and
	// their last request sent: within their admitted session, which the gate ends when the
	// origin answers that request (a visitor still reading the last answer is out, so a
	// visitor admitted in its place does not count twice).
	MaxInside int64 `json:"max_inside"`
	// Errors counts other answers of the gate, by status.
	Errors map[string]int64 `json:"errors"`
}

type gateRun struct {
	cfg                  GateConfig
	client               *http.Client
	maxAdmitted          atomic.Int64 // highest ticket number let through so far
	inside               *insideCounts
	originReq, originErr atomic.Int64
	fifo, renumbered     atomic.Int64
	admitted, done       atomic.Int64
	mu                   sync.Mutex
	errors               map[string]int64
}

// withDefaults fills what cfg leaves zero.
func (cfg GateConfig) withDefaults() GateConfig {
	cfg.Path = cmp.Or(cfg.Path, "/shop")
	cfg.Requests = cmp.Or(cfg.Requests, 10)
	cfg.ThinkTime = cmp.Or(cfg.ThinkTime, 400*time.Millisecond)
	if cfg.PollScale <= 0 {
		cfg.PollScale = 1
	}
	cfg.Deadline = cmp.Or(cfg.Deadline, 10*time.Minute)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 30*time.Second)
	return cfg
}

// RunGate runs the visitors of cfg and reports what they saw.
func RunGate(ctx context.Context, cfg GateConfig) (GateReport, error) {
	if len(cfg.Targets) == 0 || cfg.Users < 1 {
		return GateReport{}, errors.New("crowd: gate mode needs targets and users")
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, MaxIdleConns: 0, IdleConnTimeout: 30 * time.Second, MaxConnsPerHost: cfg.MaxConnsPerTarget,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	inside, err := openInside(cfg.InsideFile)
	if err != nil {
		return GateReport{}, err
	}
	defer inside.close()
	g := &gateRun{cfg: cfg, inside: inside, client: &http.Client{Transport: tr, Timeout: cfg.RequestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, errors: map[string]int64{}}
	addrs := newAddrPlan(cfg.UserAddrs, cfg.Users, cfg.Users, cfg.RequestTimeout)
	addrs.maxConns = cfg.MaxConnsPerTarget
	if addrs.active() {
		defer addrs.closeIdle()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Users {
		if cfg.Rate > 0 {
			at := start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(at)):
			}
		}
		if ctx.Err() != nil {
			break
		}
		c := g.client
		if b := addrs.client(i); b != nil {
			c = &http.Client{Transport: b.Transport, Timeout: cfg.RequestTimeout, CheckRedirect: g.client.CheckRedirect}
		}
		wg.Go(func() { g.visitor(ctx, c, cfg.Targets[i%len(cfg.Targets)]) })
	}
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return GateReport{Users: cfg.Users, Admitted: int(g.admitted.Load()), Done: int(g.done.Load()),
		OriginRequests: g.originReq.Load(), OriginErrors: g.originErr.Load(), FIFOViolations: g.fifo.Load(),
		Renumbered: g.renumbered.Load(), MaxInside: inside.most.Load(), Errors: g.errors}, nil
}

func (g *gateRun) count(status string) {
	g.mu.Lock()
	g.errors[status]++
	g.mu.Unlock()
}

// pause waits d or until ctx ends; false when ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (g *gateRun) visitor(ctx context.Context, client *http.Client, target string) {
	jar, _ := cookiejar.New(nil)
	c := *client
	c.Jar = jar
	var number int64
	for ctx.Err() == nil { // wait in line
		before := g.maxAdmitted.Load()
		resp, err := c.Get(target + g.cfg.Path)
		if err != nil {
			g.count("transport")
			if !pause(ctx, time.Second) {
				return
			}
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), `"waiting_room"`) {
			var p struct {
				Number int64 `json:"number"`
			}
			_ = json.Unmarshal(body, &p)
			if number != 0 && p.Number != number {
				g.renumbered.Add(1)
			}
			number = p.Number
			if number > 0 && number < before {
				g.fifo.Add(1)
			}
			retry, _ := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64)
			d := time.Duration(max(0.1, retry*g.cfg.PollScale) * float64(time.Second))
			d += time.Duration(rand.Int64N(int64(d/10) + 1)) // jitter, as a page has
			if !pause(ctx, d) {
				return
			}
			continue
		}
		if resp.StatusCode/100 == 2 {
			break
		}
		g.count(strconv.Itoa(resp.StatusCode))
		if !pause(ctx, time.Second) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	for {
		cur := g.maxAdmitted.Load()
		if number <= cur || g.maxAdmitted.CompareAndSwap(cur, number) {
			break
		}
	}
	g.admitted.Add(1)
	g.inside.enter()
	left := false
	defer func() {
		if !left {
			g.inside.leave()
		}
	}()
	g.originReq.Add(1) // the answer that let the visitor through came from the origin
	for i := 1; i < g.cfg.Requests; i++ {
		if !pause(ctx, g.cfg.ThinkTime) {
			return
		}
		path := g.cfg.Path
		if i == g.cfg.Requests-1 {
			path = "/done"
			g.inside.leave() // the session ends when the gate sees this request's answer
			left = true
		}
		resp, err := c.Get(target + path)
		g.originReq.Add(1)
		if err != nil {
			g.originErr.Add(1)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			g.originErr.Add(1)
		}
	}
	g.done.Add(1)
}

// Add adds o, the report of another process of the same crowd, to r: the counts are summed,
// and so is MaxInside, which is then an upper bound of the visitors inside at once (each
// process had its most at its own moment; RunGateProcs replaces it with the count of their
// shared InsideFile). FIFOViolations counts what each process saw of its own visitors (a
// process compares with the highest number it let through itself).
func (r *GateReport) Add(o GateReport) {
	r.Users += o.Users
	r.Admitted += o.Admitted
	r.Done += o.Done
	r.OriginRequests += o.OriginRequests
	r.OriginErrors += o.OriginErrors
	r.FIFOViolations += o.FIFOViolations
	r.Renumbered += o.Renumbered
	r.MaxInside += o.MaxInside
	for k, v := range o.Errors {
		if r.Errors == nil {
			r.Errors = map[string]int64{}
		}
		r.Errors[k] += v
	}
}

// String is the report as the command prints it, one aspect a line, as the API mode's.
func (r GateReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gate crowd: %d visitors\n", r.Users)
	fmt.Fprintf(&b, "  visitors    %d let through, %d done (all their requests made)\n", r.Admitted, r.Done)
	fmt.Fprintf(&b, "  origin      %d requests, %d failed (5xx or no answer)\n", r.OriginRequests, r.OriginErrors)
	fmt.Fprintf(&b, "  gate        errors %s\n", counts(r.Errors))
	fmt.Fprintf(&b, "  correctness fifo_violations %d, renumbered %d, max_inside %d\n", r.FIFOViolations, r.Renumbered, r.MaxInside)
	if r.Errors["429"] > 0 {
		b.WriteString("  note        429: the event's limits.joins_per_client refused visitors of one address: give\n" +
			"              them addresses of their own (--user-addrs 127.0.1.0/24) or raise the limit\n")
	}
	return b.String()
}

// Problems lists what went wrong for the visitors: places lost or passed over, and visitors
// who did not get through within the deadline. Empty: the run passed.
func (r GateReport) Problems() []string {
	var p []string
	if r.FIFOViolations > 0 {
		p = append(p, fmt.Sprintf("fifo_violations %d", r.FIFOViolations))
	}
	if r.Renumbered > 0 {
		p = append(p, fmt.Sprintf("renumbered %d", r.Renumbered))
	}
	if r.Done < r.Users {
		p = append(p, fmt.Sprintf("%d of %d visitors not done", r.Users-r.Done, r.Users))
	}
	return p
}

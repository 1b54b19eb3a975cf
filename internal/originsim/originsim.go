// Package originsim is a simulated origin for tests, experiments and demos of admission mode
// auto (issue 23; `waitroom origin`): a site of Servers servers, each serving one request at a
// time for a service time drawn around Service (log-normal, Jitter its sigma), with a FIFO
// queue in front. Its capacity is Servers / Service requests per second: below it latency is
// about the service time; near it the queue makes latency grow; past it the queue fills and
// requests are refused with 503 (a full queue, or a wait longer than MaxWait). Servers can be
// changed while it runs (SetServers; POST /_sim/servers), which is how an experiment halves
// and restores the capacity mid-sale.
//
// Routes: /_sim/servers (GET: {"servers":n}; POST {"servers":n}), /_sim/stats (GET: Stats as
// JSON), /done (served like any path, and answered with "Waitroom-Command: complete", which
// ends the visitor's admitted session at the gate), anything else (served).
package originsim

import (
	"cmp"
	"container/list"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/originhealth"
)

// Config configures an Origin.
type Config struct {
	Servers int           // requests served at once (>= 1)
	Service time.Duration // mean service time; default 100 ms
	Jitter  float64       // sigma of the log-normal service time (0: always Service); default 0.3
	// Queue is the most requests waiting for a server; more are refused at once (503).
	// Default 4 x Servers, at least 16.
	Queue int
	// MaxWait is the longest a request waits for a server before it is refused (503).
	// Default 2 s.
	MaxWait time.Duration
}

// Origin is the simulated site, an http.Handler.
type Origin struct {
	cfg     Config
	mu      sync.Mutex
	servers int
	busy    int
	waiters list.List // of *waiter, FIFO

	served, errors atomic.Int64
	buckets        [128]atomic.Int64 // latency of every answer, over originhealth.Bounds
}

type waiter struct {
	ch      chan struct{}
	granted bool
}

// New returns an Origin.
func New(cfg Config) *Origin {
	cfg.Servers = max(cfg.Servers, 1)
	cfg.Service = cmp.Or(cfg.Service, 100*time.Millisecond)
	if cfg.Jitter == 0 {
		cfg.Jitter = 0.3
	}
	cfg.Jitter = max(cfg.Jitter, 0)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, 2*time.Second)
	return &Origin{cfg: cfg, servers: cfg.Servers}
}

// MeanService is the mean service time.
func (o *Origin) MeanService() time.Duration { return o.cfg.Service }

// Capacity is the requests per second n servers serve: n / mean service time.
func (o *Origin) Capacity(n int) float64 { return float64(n) / o.cfg.Service.Seconds() }

// Servers returns the number of servers now.
func (o *Origin) Servers() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.servers
}

// SetServers changes the number of servers (>= 1) now: more start on the queue at once,
// fewer take no new request until the busy ones are under the new number.
func (o *Origin) SetServers(n int) {
	o.mu.Lock()
	o.servers = max(n, 1)
	o.grant()
	o.mu.Unlock()
}

func (o *Origin) queueMax() int {
	if o.cfg.Queue > 0 {
		return o.cfg.Queue
	}
	return max(16, 4*o.servers)
}

// grant hands free servers to the longest waiting. Called with mu held.
func (o *Origin) grant() {
	for o.busy < o.servers && o.waiters.Len() > 0 {
		w := o.waiters.Remove(o.waiters.Front()).(*waiter)
		w.granted = true
		o.busy++
		close(w.ch)
	}
}

// acquire waits for a server; false: refused (queue full, or waited MaxWait).
func (o *Origin) acquire() bool {
	o.mu.Lock()
	if o.busy < o.servers && o.waiters.Len() == 0 {
		o.busy++
		o.mu.Unlock()
		return true
	}
	if o.waiters.Len() >= o.queueMax() {
		o.mu.Unlock()
		return false
	}
	w := &waiter{ch: make(chan struct{})}
	e := o.waiters.PushBack(w)
	o.mu.Unlock()
	t := time.NewTimer(o.cfg.MaxWait)
	defer t.Stop()
	select {
	case <-w.ch:
		return true
	case <-t.C:
		o.mu.Lock()
		defer o.mu.Unlock()
		if w.granted {
			return true
		}
		o.waiters.Remove(e)
		return false
	}
}

func (o *Origin) release() {
	o.mu.Lock()
	o.busy--
	o.grant()
	o.mu.Unlock()
}

// serviceTime draws one service time.
func (o *Origin) serviceTime() time.Duration {
	if o.cfg.Jitter == 0 {
		return o.cfg.Service
	}
	s := o.cfg.Jitter
	f := math.Exp(s*rand.NormFloat64() - s*s/2) // mean 1
	return time.Duration(float64(o.cfg.Service) * f)
}

func (o *Origin) record(start time.Time, failed bool) {
	ms := float64(time.Since(start)) / float64(time.Millisecond)
	o.buckets[originhealth.Bucket(ms)].Add(1)
	if failed {
		o.errors.Add(1)
	} else {
		o.served.Add(1)
	}
}

// ServeHTTP serves the simulated site and its /_sim routes.
func (o *Origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_sim/servers":
		o.serveServers(w, r)
		return
	case "/_sim/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(o.Stats())
		return
	}
	start := time.Now()
	if !o.acquire() {
		o.record(start, true)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "over capacity", http.StatusServiceUnavailable)
		return
	}
	t := time.NewTimer(o.serviceTime())
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	o.release()
	if r.URL.Path == "/done" {
		w.Header().Set("Waitroom-Command", "complete")
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
	o.record(start, false)
}

func (o *Origin) serveServers(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var b struct {
			Servers int `json:"servers"`
		}
		if n, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil {
			b.Servers = n
		} else if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&b); err != nil {
			http.Error(w, "body: {\"servers\": n}", http.StatusBadRequest)
			return
		}
		if b.Servers < 1 || b.Servers > 1_000_000 {
			http.Error(w, "servers must be between 1 and 1000000", http.StatusBadRequest)
			return
		}
		o.SetServers(b.Servers)
	}
	n := o.Servers()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"servers": n, "capacity": o.Capacity(n)})
}

// Stats are an Origin's running totals: requests served and refused, and the latency of every
// answer over originhealth.Bounds (the last bucket: above them).
type Stats struct {
	Served   int64   `json:"served"`
	Errors   int64   `json:"errors"`
	Buckets  []int64 `json:"buckets"`
	Servers  int     `json:"servers"`
	Capacity float64 `json:"capacity"` // requests/s
	Busy     int     `json:"busy"`
	Queued   int     `json:"queued"`
}

// Stats returns the running totals now.
func (o *Origin) Stats() Stats {
	s := Stats{Served: o.served.Load(), Errors: o.errors.Load(), Buckets: make([]int64, len(originhealth.Bounds)+1)}
	for i := range s.Buckets {
		s.Buckets[i] = o.buckets[i].Load()
	}
	o.mu.Lock()
	s.Servers, s.Busy, s.Queued = o.servers, o.busy, o.waiters.Len()
	o.mu.Unlock()
	s.Capacity = o.Capacity(s.Servers)
	return s
}

// Window is what an Origin saw between two Stats: requests/s served and refused, and p95
// latency (ms) of all answers.
type Window struct {
	Served, Errors float64 // per second
	P95MS          float64
}

// Between returns the Window of the span from a to b (b later), span long.
func Between(a, b Stats, span time.Duration) Window {
	sec := max(span.Seconds(), 1e-3)
	w := Window{Served: float64(b.Served-a.Served) / sec, Errors: float64(b.Errors-a.Errors) / sec}
	d := make([]int64, len(b.Buckets))
	var n int64
	for i := range d {
		d[i] = b.Buckets[i]
		if i < len(a.Buckets) {
			d[i] -= a.Buckets[i]
		}
		n += d[i]
	}
	if n > 0 {
		w.P95MS = originhealth.Quantile(d, n, 0.95)
	}
	return w
}

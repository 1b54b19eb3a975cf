package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/waitroom/waitroom/internal/faultproxy"
)

// scenario is one fault: on puts it on, off takes it off (both may block, e.g. a restart).
type scenario struct {
	name string
	// hold is how long the fault stays on; 0 = Config.FaultFor.
	hold    func(Config) time.Duration
	on, off func(ctx context.Context, e *Env) error
	// stopped is the instance the fault freezes (its requests may go unanswered), -1 for none.
	stopped int
}

// victim is the instance the process faults hit.
const victim = 1

func nothing(context.Context, *Env) error { return nil }

// Scenarios are run in this order; the names are those of --only.
var scenarios = []scenario{
	{name: "redis-restart-empty", stopped: -1,
		on: func(ctx context.Context, e *Env) error { return e.stopRedis(ctx) },
		off: func(ctx context.Context, e *Env) error {
			return e.startRedis(ctx, false)
		}},
	{name: "redis-rollback", stopped: -1,
		// A snapshot now; the line moves on while the fault is "on"; then Redis comes back from
		// the older snapshot, as a lagging replica promoted or an old RDB restored would.
		on: func(ctx context.Context, e *Env) error { return e.redisCmd(ctx, "SAVE") },
		off: func(ctx context.Context, e *Env) error {
			if err := e.stopRedis(ctx); err != nil {
				return err
			}
			return e.startRedis(ctx, true)
		}},
	{name: "client-pause", stopped: -1,
		hold: func(Config) time.Duration { return 3 * time.Second },
		on:   func(ctx context.Context, e *Env) error { return e.redisCmd(ctx, "CLIENT", "PAUSE", "3000", "ALL") },
		off:  nothing}, // the pause ends by itself after 3 s
	// Latency on Redis's answers (its requests pass at once); lifting it delivers what waited.
	{name: "redis-latency-500ms", stopped: -1,
		on:  func(_ context.Context, e *Env) error { e.redisProxy.SetDelays(0, 500*time.Millisecond); return nil },
		off: func(_ context.Context, e *Env) error { e.redisProxy.SetDelays(0, 0); return nil }},
	{name: "redis-latency-3s", stopped: -1,
		on:  func(_ context.Context, e *Env) error { e.redisProxy.SetDelays(0, 3*time.Second); return nil },
		off: func(_ context.Context, e *Env) error { e.redisProxy.SetDelays(0, 0); return nil }},
	// Every PostgreSQL connection closed and new ones refused, then listening again.
	{name: "pg-cut", stopped: -1,
		on:  func(_ context.Context, e *Env) error { e.pgProxy.Cut(); return nil },
		off: func(_ context.Context, e *Env) error { return e.pgProxy.Restore() }},
	// Queries reach PostgreSQL, its answers are held, then delivered.
	{name: "pg-hang", stopped: -1,
		hold: func(c Config) time.Duration { return c.HangFor },
		on:   func(_ context.Context, e *Env) error { e.pgProxy.Hang(); return nil },
		off:  func(_ context.Context, e *Env) error { e.pgProxy.Release(); return nil }},
	{name: "sigkill", stopped: -1,
		on: func(_ context.Context, e *Env) error {
			if err := e.instances[victim].signal(syscall.SIGKILL); err != nil {
				return err
			}
			e.instances[victim].waitExit(10 * time.Second)
			return nil
		},
		off: func(ctx context.Context, e *Env) error { return e.instances[victim].start(ctx) }},
	{name: "sigstop", stopped: victim,
		on:  func(_ context.Context, e *Env) error { return e.instances[victim].signal(syscall.SIGSTOP) },
		off: func(_ context.Context, e *Env) error { return e.instances[victim].signal(syscall.SIGCONT) }},
	{name: "sigterm", stopped: -1,
		on: func(_ context.Context, e *Env) error {
			if err := e.instances[victim].signal(syscall.SIGTERM); err != nil {
				return err
			}
			if !e.instances[victim].waitExit(30 * time.Second) {
				return errors.New("the instance did not exit within 30 s of SIGTERM")
			}
			return nil
		},
		off: func(ctx context.Context, e *Env) error { return e.instances[victim].start(ctx) }},
	{name: "pubsub-kill", stopped: -1,
		on:  func(ctx context.Context, e *Env) error { return e.redisCmd(ctx, "CLIENT", "KILL", "TYPE", "pubsub") },
		off: nothing},
	{name: "script-flush", stopped: -1,
		on:  func(ctx context.Context, e *Env) error { return e.redisCmd(ctx, "SCRIPT", "FLUSH") },
		off: nothing},
}

// ScenarioNames lists the scenarios in the order they run.
func ScenarioNames() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// Probe event and campaign: every scenario's recovery is measured on them.
const (
	probeEvent = "chaos-probe"
	probeCamp  = "chaos-probe"
)

// admin sends one admin PUT, retried for up to 30 s over every instance.
func admin(ctx context.Context, e *Env, client *http.Client, path string, body any) error {
	h := &History{Client: "setup"}
	r := requester{client: client, targets: e.Targets(), adminKey: e.AdminKey(), h: h}
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		x := r.do(ctx, "setup", n%len(r.targets), http.MethodPut, path, r.adminKey, nil, body, nil, nil)
		if x.Code == http.StatusOK || x.Code == http.StatusCreated {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil || (x.Code != 0 && x.Code < 500) {
			return fmt.Errorf("PUT %s: answered %d %s %s", path, x.Code, x.Problem, x.Failure)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// seatRows are the rows of a scenario's seat map ("A".."J").
var seatRows = []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}

func seatNames(perRow int) []string {
	var out []string
	for _, r := range seatRows {
		for i := 1; i <= perRow; i++ {
			out = append(out, fmt.Sprintf("%s-%02d", r, i))
		}
	}
	return out
}

// runScenario runs one scenario on a fresh event and campaign and checks it.
func runScenario(ctx context.Context, e *Env, cfg Config, sc scenario) Row {
	row := Row{Scenario: sc.name, Bound: cfg.RecoveryBound}
	event, camp := "chaos-"+sc.name, "chaos-"+sc.name
	client := newHTTPClient(cfg.ClientTimeout, 4*(cfg.LineUsers+cfg.Entrants)+16)
	defer client.CloseIdleConnections()

	perRow := max(20, (2*cfg.LineUsers+len(seatRows)-1)/len(seatRows))
	if err := admin(ctx, e, client, "/v1/events/"+event, map[string]any{
		"name": sc.name, "max_active": cfg.MaxActive, "admit_rate": cfg.AdmitRate,
		"session_ttl_s": 20, "claim_ttl_s": 6, "hold_ttl_s": 20, "max_per_booking": 4,
		"seat_map": map[string]any{"rows": seatRows, "per_row": perRow},
	}); err != nil {
		row.Err = err.Error()
		return row
	}
	// A stock the burst of entrants does not exhaust, so that issuance goes on during the fault.
	stock := max(1, cfg.Entrants*3/4)
	if err := admin(ctx, e, client, "/v1/campaigns/"+camp, map[string]any{"stock": stock}); err != nil {
		row.Err = err.Error()
		return row
	}
	seats := seatNames(perRow)

	hold := cfg.FaultFor
	if sc.hold != nil {
		hold = sc.hold(cfg)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu        sync.Mutex
		histories []*History
		users     sync.WaitGroup // the clients
		bg        sync.WaitGroup // the spawners
		samplerWG sync.WaitGroup
	)
	newHistory := func(name, user string) *History {
		h := &History{Client: name, User: user, Event: event, Camp: camp}
		mu.Lock()
		histories = append(histories, h)
		mu.Unlock()
		return h
	}
	targets := e.Targets()
	final := make(chan struct{}) // closed after recovery: the entrants' final reads
	sctx, stopSampler := context.WithCancel(cctx)
	defer stopSampler()
	samplerWG.Go(func() {
		sampler(sctx, requester{client: client, targets: targets, h: newHistory("sampler", "")}, event, 200*time.Millisecond)
	})

	// Arrivals: half of the clients in a burst over the first half second (a flash crowd, so
	// that a line forms), the other half spread over the warm-up, the fault and two seconds
	// after it.
	span := cfg.Warmup + hold + 2*time.Second
	start := time.Now()
	arrival := func(i, n int) time.Time {
		if burst := n / 2; i < burst {
			return start.Add(500 * time.Millisecond * time.Duration(i) / time.Duration(burst))
		} else {
			return start.Add(span * time.Duration(i-burst) / time.Duration(n-burst))
		}
	}
	spawn := func(n int, run func(i int)) {
		bg.Go(func() {
			for i := range n {
				if !sleepCtx(cctx, time.Until(arrival(i, n))) {
					return
				}
				users.Go(func() { run(i) })
			}
		})
	}
	spawn(cfg.LineUsers, func(i int) {
		user := fmt.Sprintf("%s-u%d", sc.name, i)
		u := &lineUser{r: requester{client: client, targets: targets, adminKey: e.AdminKey(), h: newHistory(fmt.Sprintf("line-%d", i), user)},
			rng: rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano()))), event: event, seats: seats,
			push: i % 3, hold: cfg.AdmittedFor, home: i % len(targets)}
		u.run(cctx)
	})
	spawn(cfg.Entrants, func(i int) {
		user := fmt.Sprintf("%s-c%d", sc.name, i)
		en := &entrant{r: requester{client: client, targets: targets, adminKey: e.AdminKey(), h: newHistory(fmt.Sprintf("entrant-%d", i), user)},
			rng: rand.New(rand.NewPCG(uint64(i)+1<<32, uint64(start.UnixNano()))), camp: camp, home: i % len(targets), every: 300 * time.Millisecond, final: final}
		en.run(cctx)
	})

	w := Window{Bound: cfg.RecoveryBound, Stopped: sc.stopped}
	sleepCtx(cctx, cfg.Warmup)
	w.On = time.Now()
	var faultErr error
	if err := sc.on(cctx, e); err != nil {
		faultErr = fmt.Errorf("putting the fault on: %w", err)
	}
	sleepCtx(cctx, hold)
	w.Off = time.Now()
	if err := sc.off(cctx, e); err != nil {
		faultErr = errors.Join(faultErr, fmt.Errorf("taking the fault off: %w", err))
	}

	// Recovery: probe rounds until one fully succeeds, within the bound.
	probeClient := newHTTPClient(3*time.Second, 8)
	defer probeClient.CloseIdleConnections()
	pr := requester{client: probeClient, targets: targets, adminKey: e.AdminKey(), h: newHistory("probe", "")}
	for round := 0; time.Since(w.Off) < cfg.RecoveryBound && cctx.Err() == nil; round++ {
		if probeRound(cctx, pr, probeEvent, probeCamp, event, round) {
			w.Recovered = time.Now()
			break
		}
		sleepCtx(cctx, 250*time.Millisecond)
	}

	close(final)

	// Let the clients finish (bounded), then stop whoever is left.
	done := make(chan struct{})
	go func() { bg.Wait(); users.Wait(); close(done) }()
	// The bound leaves time for the line to drain at the pace max_active allows (each admitted
	// user stays AdmittedFor, plus about a second to hold and book).
	drainFor := cfg.Drain + time.Duration(cfg.LineUsers)*(cfg.AdmittedFor+time.Second)/time.Duration(max(1, cfg.MaxActive))
	drain := time.NewTimer(drainFor)
	select {
	case <-done:
		drain.Stop()
	case <-drain.C:
	case <-ctx.Done():
	}
	stopSampler()
	cancel()
	<-done
	samplerWG.Wait()
	row.Activity = activity(histories)
	if cfg.HistoryDir != "" {
		if err := writeHistories(filepath.Join(cfg.HistoryDir, sc.name+".json"), histories); err != nil {
			fmt.Fprintf(cfg.Log, "chaos: writing histories: %v\n", err)
		}
	}
	if ctx.Err() != nil {
		row.Err = "interrupted"
		return row
	}
	if faultErr != nil {
		row.Err = faultErr.Error()
		return row
	}

	facts, err := e.sqlFacts(ctx, event, camp)
	if err != nil {
		row.Err = "reading SQL: " + err.Error()
		return row
	}
	s := Scope{Histories: histories, Window: w, SQL: facts, Event: event, Campaign: camp, ClientTimeout: cfg.ClientTimeout}
	for _, inv := range Invariants {
		row.Verdicts = append(row.Verdicts, inv.Check(s))
	}
	row.Recovered = !w.Recovered.IsZero()
	if row.Recovered {
		row.Recovery = w.Recovered.Sub(w.Off)
	}
	return row
}

// sqlFacts reads the scenario's bookings and coupons straight from the run's database.
func (e *Env) sqlFacts(ctx context.Context, event, camp string) (SQLFacts, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	f := SQLFacts{Bookings: map[string][]string{}, Coupons: map[string]CouponOwner{}}
	if err := e.db.QueryRow(ctx, `SELECT sum(capacity)::bigint, sum(sold)::bigint FROM inventory_slots WHERE event_id = $1 HAVING count(*) > 0`, event).
		Scan(&f.Capacity, &f.InventorySold); err != nil {
		return f, fmt.Errorf("inventory: %w", err)
	}
	rows, err := e.db.Query(ctx, `SELECT id, seats FROM bookings WHERE event_id = $1 AND status = 'CONFIRMED'`, event)
	if err != nil {
		return f, err
	}
	for rows.Next() {
		var id, seats string
		if err := rows.Scan(&id, &seats); err != nil {
			rows.Close()
			return f, err
		}
		f.Bookings[id] = nil
		if seats != "" {
			f.Bookings[id] = strings.Split(seats, ",")
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return f, err
	}
	if err := e.db.QueryRow(ctx, `SELECT stock, issued FROM campaigns WHERE id = $1`, camp).
		Scan(&f.Stock, &f.IssuedColumn); err != nil {
		return f, fmt.Errorf("campaign: %w", err)
	}
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM coupons WHERE campaign_id = $1`, camp).Scan(&f.CouponRows); err != nil {
		return f, err
	}
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM (SELECT code FROM coupons GROUP BY code HAVING count(*) > 1) d`).Scan(&f.DupCodes); err != nil {
		return f, err
	}
	rows, err = e.db.Query(ctx, `SELECT code, campaign_id, user_id FROM coupons`)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	for rows.Next() {
		var code string
		var o CouponOwner
		if err := rows.Scan(&code, &o.Campaign, &o.User); err != nil {
			return f, err
		}
		f.Coupons[code] = o
	}
	return f, rows.Err()
}

// heal puts the deployment back in order after a scenario whose off step failed: Redis up,
// proxies clean and listening, every instance running and not stopped.
func (e *Env) heal(ctx context.Context) error {
	var errs []error
	if !redisPing(e.redis.addr()) {
		e.redis.kill()
		errs = append(errs, e.startRedis(ctx, false))
	}
	errs = append(errs, e.healProxies())
	for _, in := range e.instances {
		_ = in.signal(syscall.SIGCONT)
		if in.exitedNow() {
			errs = append(errs, in.start(ctx))
		}
	}
	return errors.Join(errs...)
}

// healProxies takes every fault off both proxies: no delay, nothing held, listening.
func (e *Env) healProxies() error {
	var errs []error
	for _, p := range []*faultproxy.Proxy{e.redisProxy, e.pgProxy} {
		p.SetDelay(0)
		p.Release()
		errs = append(errs, p.Restore())
	}
	return errors.Join(errs...)
}

// writeHistories writes the clients' histories of one scenario as JSON (--histories).
func writeHistories(path string, hs []*History) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(hs, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

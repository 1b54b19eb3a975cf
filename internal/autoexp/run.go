package autoexp

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/crowd"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/originsim"
	"github.com/waitroom/waitroom/internal/redisstore"
)

// crowdConns caps the crowd's connections to each gate: the instances and the crowd share one
// process's open files (20,000 on the machine of the figures), two per connection, beside the
// gates' connections to the origin.
const crowdConns = 1500

const (
	eventID  = "autoexp"
	adminKey = "autoexp-admin-key-0123456789abcdef"
	tokenKey = "autoexp-token-key-0123456789abcdef"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fleet is the instances of one capacity's run.
type fleet struct {
	apps  []*app.App
	apis  []string // base URLs of the APIs
	gates []string // base URLs of the gates
	stop  func()
}

// startFleet starts cfg.Instances instances with a gate in front of origin.
func startFleet(ctx context.Context, cfg Config, origin string) (*fleet, error) {
	f := &fleet{}
	var cleanups []func()
	f.stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	fail := func(err error) (*fleet, error) { f.stop(); return nil, err }
	gateYAML := fmt.Sprintf("listen: 127.0.0.1:0\nsites:\n  - origin: %s\n    protect:\n      - event: %s\n        paths: [\"/shop\", \"/done\"]\n", origin, eventID)
	var rdb rueidis.Client
	var dbURL string
	prefix := "wr-autoexp-" + randomHex(4) + ":"
	if cfg.Instances > 1 {
		var err error
		if rdb, err = redisstore.Dial(cfg.RedisURL); err != nil {
			return fail(err)
		}
		cleanups = append(cleanups, rdb.Close)
		// Registered before the instances: their keys go after they stopped.
		cleanups = append(cleanups, func() {
			// The run's keys: everything under its prefix.
			c := context.Background()
			var cursor uint64
			for {
				e, err := rdb.Do(c, rdb.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
				if err != nil {
					return
				}
				for _, k := range e.Elements {
					_ = rdb.Do(c, rdb.B().Del().Key(k).Build()).Error()
				}
				if cursor = e.Cursor; cursor == 0 {
					return
				}
			}
		})
		name := "waitroom_autoexp_" + randomHex(6)
		admin, err := sql.Open("pgx", cfg.DatabaseURL)
		if err != nil {
			return fail(err)
		}
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			admin.Close()
			return fail(fmt.Errorf("create database: %w", err))
		}
		cleanups = append(cleanups, func() {
			_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			admin.Close()
		})
		u, err := url.Parse(cfg.DatabaseURL)
		if err != nil {
			return fail(err)
		}
		u.Path = "/" + name
		dbURL = u.String()
	} else {
		dir, err := os.MkdirTemp("", "autoexp")
		if err != nil {
			return fail(err)
		}
		cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
		dbURL = filepath.Join(dir, "waitroom.db")
	}
	for range cfg.Instances {
		file, err := gateway.Parse("gate.yaml", []byte(gateYAML))
		if err != nil {
			return fail(err)
		}
		apiLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		gateLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			apiLn.Close()
			return fail(err)
		}
		a, err := app.New(ctx, app.Config{DatabaseURL: dbURL, Redis: rdb, RedisPrefix: prefix, AdminKey: adminKey, TokenKey: tokenKey,
			Listener: apiLn, Gate: &file, GateListener: gateLn, Drain: -1, ShutdownGrace: 5 * time.Second,
			// The crowd comes from one address, over at most crowdConns connections a gate.
			Conns:  connlimit.Config{MaxConnsPerClient: 2 * crowdConns},
			Logger: slog.New(slog.NewTextHandler(cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			apiLn.Close()
			gateLn.Close()
			return fail(err)
		}
		if err := a.Start(ctx); err != nil {
			return fail(err)
		}
		cleanups = append(cleanups, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = a.Stop(sctx)
		})
		f.apps = append(f.apps, a)
		f.apis = append(f.apis, "http://"+apiLn.Addr().String())
		f.gates = append(f.gates, "http://"+gateLn.Addr().String())
	}
	return f, nil
}

// putEvent creates the experiment's event in mode auto.
func putEvent(ctx context.Context, api string, cfg Config) error {
	body := map[string]any{
		// The default claim TTL (60 s): waiting visitors poll at most every 20 s far back, and
		// a poll held up by the busy host does not lose an admission (claim_ttl_s 15 did, at
		// C = 1,000: polls every 5 s, and an admission ended unclaimed behind a poll in flight).
		"name": "auto experiment", "max_active": 100000, "session_ttl_s": 30,
		"admission_mode": "auto",
		"auto": map[string]any{"target_p95_ms": cfg.Target.Milliseconds(), "error_budget": cfg.ErrorBudget,
			"min_max_active": 1, "max_max_active": 100000},
		// The crowd comes from one address: the limits per client are lifted.
		"limits": map[string]any{"joins_per_client": 1000000000, "tickets_per_client": 1000000000, "polls_per_ticket": 1000000000,
			"push_per_client": 1000000000},
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, api+"/v1/events/"+eventID, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var p bytes.Buffer
		_, _ = p.ReadFrom(resp.Body)
		return fmt.Errorf("PUT event: %d %s", resp.StatusCode, p.String())
	}
	return nil
}

// RunCapacity runs the experiment for one capacity.
func RunCapacity(ctx context.Context, cfg Config, capacity int) (Result, error) {
	cfg = cfg.withDefaults()
	servers := max(1, int(float64(capacity)*cfg.Service.Seconds()+0.5))
	service := cfg.Service
	if servers%2 == 1 { // an even number of servers, so that halving them halves the capacity
		servers++
		service = time.Duration(float64(servers) / float64(capacity) * float64(time.Second))
	}
	o := originsim.New(originsim.Config{Servers: servers, Service: service})
	r := Result{Capacity: capacity}
	fmt.Fprintf(cfg.Log, "C=%d: %d servers of %v; measuring the most the objective allows\n", capacity, servers, service)
	if r.Allowed = cfg.Allowed; r.Allowed == 0 {
		r.Allowed = Allowed(ctx, o, cfg.Target, cfg.Think, capacity, cfg.Log)
	}
	if r.Allowed == 0 {
		return r, errors.New("the sweep found no load under the target")
	}
	fmt.Fprintf(cfg.Log, "C=%d: the objective allows %.0f req/s\n", capacity, r.Allowed)
	srv := httptest.NewServer(o)
	defer srv.Close()
	f, err := startFleet(ctx, cfg, srv.URL)
	if err != nil {
		return r, err
	}
	defer f.stop()
	if err := putEvent(ctx, f.apis[0], cfg); err != nil {
		return r, err
	}
	total := cfg.Settle + cfg.Halved + max(cfg.Restored, 0)
	// A crowd larger than the origin takes: visitors arrive 1.5x as fast as the most allowed
	// admits them, after a first wave of twice the sessions it holds.
	perSession := float64(cfg.Requests) * (cfg.Think + service).Seconds()
	rate := 1.3 * r.Allowed / float64(cfg.Requests)
	users := int(2*r.Allowed*perSession/float64(cfg.Requests)*float64(cfg.Requests)) + int(rate*total.Seconds())
	s := &sampler{o: o, start: time.Now(), trace: cfg.Trace, state: func(ctx context.Context) (autoadmit.State, error) {
		st, _, err := autoadmit.ReadState(ctx, f.apps[0].Backend.Auto, eventID, f.apps[0].Registry.List()[0].Auto)
		return st, err
	}}
	sctx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	go s.run(sctx)
	type crowdOut struct {
		rep crowd.GateReport
		err error
	}
	done := make(chan crowdOut, 1)
	cctx, stopCrowd := context.WithCancel(ctx)
	defer stopCrowd()
	go func() {
		gc := crowd.GateConfig{Targets: f.gates, Users: users, Rate: rate, Requests: cfg.Requests,
			ThinkTime: cfg.Think, Deadline: total + 30*time.Second, PollScale: 1, MaxConnsPerTarget: crowdConns}
		var rep crowd.GateReport
		var err error
		if cfg.CrowdProcs > 0 {
			var exe string
			if exe, err = os.Executable(); err == nil {
				rep, err = crowd.RunGateProcs(cctx, gc, cfg.CrowdProcs, exe, cfg.Log)
			}
		} else {
			rep, err = crowd.RunGate(cctx, gc)
		}
		done <- crowdOut{rep, err}
	}()
	fmt.Fprintf(cfg.Log, "C=%d: %d instance(s), %d visitors at %.0f/s\n", capacity, cfg.Instances, users, rate)
	progress := func(phase string, until time.Duration) {
		for time.Since(s.start) < until && ctx.Err() == nil {
			pause(ctx, 5*time.Second)
			sec := s.between(time.Since(s.start).Seconds()-5, time.Since(s.start).Seconds())
			if len(sec) > 0 {
				last := sec[len(sec)-1]
				fmt.Fprintf(cfg.Log, "  %s t=%3.0fs load %4.0f/s (5s %4.0f) p95 %4.0f ms errors %3.0f/s limit %4d active %4d servers %d gate p95 %4.0f ms (less %3.0f ms own delay): %s\n",
					phase, last.T, last.Load, avg(sec, len(sec)-1, 5, load), p95(sec), last.Errors, last.MaxActive, last.Active, last.Servers,
					last.GateP95MS, last.GateDelayMS, last.reason)
			}
		}
	}
	progress("settle", cfg.Settle)
	o.SetServers(max(1, servers/2))
	progress("halved", cfg.Settle+cfg.Halved)
	if cfg.Restored > 0 {
		o.SetServers(servers)
		progress("restored", total)
	}
	stopSampler()
	stopCrowd()
	out := <-done
	if out.err != nil {
		return r, out.err
	}
	st := cfg.Settle.Seconds()
	hv := st + cfg.Halved.Seconds()
	analyse(&r, s.between(0, st), s.between(st, hv), s.between(hv, total.Seconds()), cfg.Target, 0)
	r.FIFOViolations, r.Renumbered, r.MaxInside, r.Admitted = out.rep.FIFOViolations, out.rep.Renumbered, out.rep.MaxInside, out.rep.Admitted
	r.MaxLimit = s.maxLim.Load()
	r.Seconds = s.between(0, total.Seconds()+1)
	fmt.Fprintf(cfg.Log, "C=%d: crowd %s\n", capacity, out.rep)
	return r, nil
}

// Line is r as one line of the report.
func (r Result) Line(target time.Duration) string {
	verdict := "HOLDS"
	if p := r.Holds(target); len(p) > 0 {
		verdict = "NOT MET: " + strings.Join(p, "; ")
	}
	restored := "not run"
	if r.Restored {
		restored = fmt.Sprintf("back up in %3.0f s", r.RestoreS)
	}
	return fmt.Sprintf("C=%-5d allowed %5.0f/s  settled %3.0f s  load %5.0f/s (%+.1f%%)  p95 %4.0f ms  errors %.2f%%  swing load %4.1f%% limit %4.1f%%  halved: under target in %3.0f s (load %4.0f/s)  restored: %s  fifo %d renumbered %d max_inside %d<=%d  %s",
		r.Capacity, r.Allowed, r.SettleS, r.LoadMean, 100*(r.LoadMean/r.Allowed-1), r.P95MS, 100*r.ErrorRate, 100*r.LoadSwing, 100*r.LimitSwing,
		r.RecoverS, r.HalvedLoad, restored, r.FIFOViolations, r.Renumbered, r.MaxInside, r.MaxLimit, verdict)
}

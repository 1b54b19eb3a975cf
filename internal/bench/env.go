package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for CREATE/DROP DATABASE
	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
)

//go:embed baseline/*.lua
var baselineFS embed.FS

// env is what the targets share: the Redis client and a store on a key prefix of this run,
// redis-benchmark's address, and the database made for the instances started.
type env struct {
	cfg    Config
	client rueidis.Client
	store  *redisstore.Store
	prefix string // every key of this run starts with it
	host   string // redis-benchmark -h
	port   string // redis-benchmark -p
	auth   []string
	rb     string // redis-benchmark path, "" when missing
	notes  []string

	bigOnce sync.Once
	big     bigLine
	bigErr  error

	dbName, dbURL      string
	extraDBs           []string // more databases made (newDatabase), dropped at the end
	adminKey, tokenKey string   // of the instances started (one deployment)
}

// bigLine is the event with cfg.Waiting anonymous tickets waiting, shared by the memory and
// status targets.
type bigLine struct {
	event string
	gen   uint32
	fill  time.Duration
}

func newEnv(ctx context.Context, cfg Config) (*env, error) {
	u, err := url.Parse(cfg.RedisURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("--redis must be one redis:// URL (the ceilings come from redis-benchmark against one server), got %q", cfg.RedisURL)
	}
	c, err := redisstore.Dial(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if c.Mode() == rueidis.ClientModeCluster {
		c.Close()
		return nil, errors.New("--redis names a Redis Cluster; run the bench against one standalone Redis (one shard's figures are the same)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	e := &env{cfg: cfg, client: c, prefix: "wrbench:" + hex.EncodeToString(b[:]) + ":"}
	if e.store, err = redisstore.New(redisstore.Config{Client: c, Prefix: e.prefix}); err != nil {
		c.Close()
		return nil, err
	}
	e.host, e.port = u.Hostname(), u.Port()
	e.port = cmp.Or(e.port, "6379")
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			e.auth = append(e.auth, "-a", p)
			if name := u.User.Username(); name != "" && name != "default" {
				e.auth = append(e.auth, "--user", name)
			}
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" && db != "0" {
		e.auth = append(e.auth, "--dbnum", db)
	}
	if p, err := exec.LookPath("redis-benchmark"); err == nil {
		e.rb = p
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", cfg.RedisURL, err)
	}
	e.progress("redis %s, keys under %q (deleted at the end)", cfg.RedisURL, e.prefix)
	return e, nil
}

func (e *env) progress(format string, a ...any) {
	fmt.Fprintf(e.cfg.Progress, time.Now().Format("15:04:05 ")+format+"\n", a...)
}

func (e *env) note(format string, a ...any) { e.notes = append(e.notes, fmt.Sprintf(format, a...)) }

// close deletes every key of the run and the database, and closes the client.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := redisstore.DeletePrefix(ctx, e.client, e.prefix); err != nil {
		e.progress("cleanup: %v", err)
	}
	for _, name := range append([]string{e.dbName}, e.extraDBs...) {
		if name == "" {
			continue
		}
		if err := e.dropDatabase(ctx, name); err != nil {
			e.progress("cleanup: drop database %s: %v", name, err)
		}
	}
	e.client.Close()
}

// machine describes where the run happens.
func (e *env) machine(ctx context.Context) string {
	version := "?"
	if s, err := e.client.Do(ctx, e.client.B().Info().Section("server").Build()).ToString(); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	load := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%d CPUs, %s/%s, %s, Redis %s, load average %s at the start",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), version, load)
}

// key returns a key of this run.
func (e *env) key(s string) string { return e.prefix + s }

// newEvent creates an event on the run's store (max_active as given, defaults otherwise).
func (e *env) newEvent(ctx context.Context, id string, maxActive int64) (uint32, error) {
	return e.store.PutEvent(ctx, event.Event{ID: id, MaxActive: maxActive}.WithDefaults().LineConfig(), 1)
}

// baseline returns the text of a baseline script.
func (e *env) baseline(name string) (string, error) {
	if e.cfg.BaselineDir != "" {
		b, err := os.ReadFile(filepath.Join(e.cfg.BaselineDir, name))
		return string(b), err
	}
	b, err := baselineFS.ReadFile("baseline/" + name)
	return string(b), err
}

// scriptLoad loads a script and returns its SHA-1.
func (e *env) scriptLoad(ctx context.Context, src string) (string, error) {
	return e.client.Do(ctx, e.client.B().ScriptLoad().Script(src).Build()).ToString()
}

// fill appends n tickets to event's line through the store, from many goroutines (the client
// pipelines them), and returns the rate. user, when set, names the i-th user (named joins).
// It gives up after limit.
func (e *env) fill(ctx context.Context, event string, n, goroutines int, limit time.Duration, user func(i int64) string) (float64, error) {
	var next atomic.Int64 // loadRate makes exactly n calls: each takes the next user index
	rate, err := loadRate(ctx, n, goroutines, limit, func(ctx context.Context, _ *mrand.Rand) error {
		p := queue.JoinParams{Event: event}
		if user != nil {
			p.UserKey = user(next.Add(1))
		}
		_, err := e.store.Join(ctx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("filling %d tickets: %w", n, err)
	}
	return rate, nil
}

// bigLineOf returns the shared line of cfg.Waiting anonymous tickets, making it on first use.
func (e *env) bigLineOf(ctx context.Context) (bigLine, error) {
	e.bigOnce.Do(func() {
		e.big.event = "big"
		if e.big.gen, e.bigErr = e.newEvent(ctx, e.big.event, 1); e.bigErr != nil {
			return
		}
		e.progress("filling a line of %s anonymous tickets through the store", thousands(float64(e.cfg.Waiting)))
		start := time.Now()
		// Ticket 1 takes the only slot; the cfg.Waiting after it wait.
		_, e.bigErr = e.fill(ctx, e.big.event, e.cfg.Waiting+1, storeGoroutines, 10*time.Minute, nil)
		e.big.fill = time.Since(start)
	})
	return e.big, e.bigErr
}

// freePort returns a free loopback address.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// database creates (once) a fresh PostgreSQL database for the instances of this run and
// returns its URL.
func (e *env) database(ctx context.Context) (string, error) {
	if e.dbURL != "" {
		return e.dbURL, nil
	}
	name, u, err := e.newDatabase(ctx)
	if err != nil {
		return "", err
	}
	e.dbName, e.dbURL = name, u
	return u, nil
}

// newDatabase creates a fresh PostgreSQL database (dropped by close when it is the run's, or
// listed in extraDBs) and returns its name and URL.
func (e *env) newDatabase(ctx context.Context) (string, string, error) {
	u, err := url.Parse(e.cfg.DatabaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", fmt.Errorf("--database must be a postgres:// URL, got %q", e.cfg.DatabaseURL)
	}
	db, err := sql.Open("pgx", e.cfg.DatabaseURL)
	if err != nil {
		return "", "", err
	}
	defer db.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "waitroom_bench_" + hex.EncodeToString(b[:])
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(cctx, `CREATE DATABASE "`+name+`"`); err != nil {
		return "", "", fmt.Errorf("create database on %s: %w", u.Redacted(), err)
	}
	u.Path = "/" + name
	return name, u.String(), nil
}

func (e *env) dropDatabase(ctx context.Context, name string) error {
	db, err := sql.Open("pgx", e.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
	return err
}

package chaos

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/faultproxy"
)

// Env is everything one chaos run starts: its own redis-server in a temporary directory, its own
// PostgreSQL database on the local server, a TCP fault proxy in front of each, and the waitroom
// serve instances that reach both through the proxies. Close stops and removes all of it; it is
// safe to call more than once and after a partial start.
type Env struct {
	cfg EnvConfig
	dir string

	redis      *redisProc
	admin      rueidis.Client // direct to redis-server, not through the proxy
	pgAdminURL string
	dbName     string
	db         *pgx.Conn // direct to the run's database: the invariants' SQL reads

	redisProxy *faultproxy.Proxy
	pgProxy    *faultproxy.Proxy

	instances []*instance

	closeOnce sync.Once
}

// EnvConfig says what Env starts.
type EnvConfig struct {
	// Binary is the waitroom executable started as `serve`. Required.
	Binary string
	// RedisServer is the redis-server executable. Defaults to "redis-server" on the PATH.
	RedisServer string
	// PostgresURL is the maintenance database of the local server, on which the run's database is
	// created and dropped. Defaults to postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
	PostgresURL string
	// Instances is the number of serve processes. Defaults to 3.
	Instances int
	// AdminKey and TokenKey are shared by every instance. Default to random keys.
	AdminKey, TokenKey string
	// Log receives setup messages (nil = discard).
	Log io.Writer
}

// DefaultPostgresURL is the maintenance database the run's database is created on.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// StartEnv starts Redis, the database, the proxies and the instances. On error everything
// already started is stopped again.
func StartEnv(ctx context.Context, cfg EnvConfig) (_ *Env, err error) {
	if cfg.Binary == "" {
		return nil, errors.New("chaos: no waitroom binary")
	}
	cfg.RedisServer = cmp.Or(cfg.RedisServer, "redis-server")
	cfg.PostgresURL = cmp.Or(cfg.PostgresURL, DefaultPostgresURL)
	cfg.Instances = cmp.Or(cfg.Instances, 3)
	cfg.AdminKey = cmp.Or(cfg.AdminKey, "chaos-admin-"+randomHex(16))
	cfg.TokenKey = cmp.Or(cfg.TokenKey, "chaos-token-"+randomHex(24))
	cfg.Log = cmp.Or(cfg.Log, io.Discard)
	dir, err := os.MkdirTemp("", "waitroom-chaos-")
	if err != nil {
		return nil, err
	}
	e := &Env{cfg: cfg, dir: dir, pgAdminURL: cfg.PostgresURL}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()

	// Redis: a private port, persistence off except for the snapshots this run asks for.
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	e.redis = &redisProc{bin: cfg.RedisServer, dir: dir, port: port}
	if err := e.redis.start(ctx, false); err != nil {
		return nil, err
	}
	e.admin, err = rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{e.redis.addr()}, DisableCache: true,
		ConnWriteTimeout: 5 * time.Second, DisableRetry: true,
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: admin client of redis: %w", err)
	}
	fmt.Fprintf(cfg.Log, "chaos: redis-server on %s (dir %s)\n", e.redis.addr(), dir)

	// PostgreSQL: a fresh database, dropped at Close.
	if err := e.createDatabase(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "chaos: database %s\n", e.dbName)

	// Fault proxies.
	if e.redisProxy, err = faultproxy.New(e.redis.addr()); err != nil {
		return nil, fmt.Errorf("chaos: start the redis proxy: %w", err)
	}
	pgHost, err := hostOf(cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	if e.pgProxy, err = faultproxy.New(pgHost); err != nil {
		return nil, fmt.Errorf("chaos: start the postgres proxy: %w", err)
	}

	// Instances.
	dbURL, err := withDatabase(cfg.PostgresURL, e.dbName, e.pgProxy.Addr())
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"WAITROOM_REDIS_URL=redis://"+e.redisProxy.Addr(),
		"WAITROOM_DATABASE_URL="+dbURL,
		"WAITROOM_ADMIN_KEY="+cfg.AdminKey,
		"WAITROOM_TOKEN_KEY="+cfg.TokenKey,
		"WAITROOM_LOG_FORMAT=text",
	)
	for i := range cfg.Instances {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		in := &instance{index: i, bin: cfg.Binary, env: env, addr: "127.0.0.1:" + strconv.Itoa(port),
			logPath: filepath.Join(dir, fmt.Sprintf("serve-%d.log", i))}
		e.instances = append(e.instances, in)
		if err := in.start(ctx); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(cfg.Log, "chaos: %d instances: %s\n", len(e.instances), strings.Join(e.Targets(), " "))
	return e, nil
}

// Targets returns the base URLs of the instances, in instance order.
func (e *Env) Targets() []string {
	out := make([]string, len(e.instances))
	for i, in := range e.instances {
		out[i] = "http://" + in.addr
	}
	return out
}

// AdminKey is the admin key every instance shares.
func (e *Env) AdminKey() string { return e.cfg.AdminKey }

// Close stops the instances, the proxies and Redis, drops the database and removes the
// temporary directory. Errors are reported to the log, never returned: Close runs on every exit
// path.
func (e *Env) Close() {
	e.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, in := range e.instances {
			wg.Go(in.stop)
		}
		wg.Wait()
		for _, p := range []*faultproxy.Proxy{e.redisProxy, e.pgProxy} {
			if p != nil {
				_ = p.Close()
			}
		}
		if e.admin != nil {
			e.admin.Close()
		}
		if e.redis != nil {
			e.redis.kill()
		}
		if e.db != nil {
			_ = e.db.Close(context.Background())
		}
		if e.dbName != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := dropDatabase(ctx, e.pgAdminURL, e.dbName); err != nil {
				fmt.Fprintf(e.cfg.Log, "chaos: dropping database %s: %v\n", e.dbName, err)
			}
			cancel()
		}
		if e.dir != "" && os.Getenv("WAITROOM_CHAOS_KEEP") == "" {
			_ = os.RemoveAll(e.dir)
		}
	})
}

// redisCmd sends one admin command straight to redis-server.
func (e *Env) redisCmd(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return e.admin.Do(ctx, e.admin.B().Arbitrary(args...).Build()).Error()
}

// stopRedis stops redis-server without saving (SHUTDOWN NOSAVE, SIGKILL if it does not go).
func (e *Env) stopRedis(ctx context.Context) error {
	_ = e.redisCmd(ctx, "SHUTDOWN", "NOSAVE") // the reply is the closed connection
	e.redis.wait(5 * time.Second)
	e.redis.kill()
	if redisPing(e.redis.addr()) {
		return errors.New("redis-server still answers after SHUTDOWN NOSAVE and SIGKILL")
	}
	return nil
}

// startRedis starts redis-server again: empty, or from the last SAVE when fromSnapshot.
func (e *Env) startRedis(ctx context.Context, fromSnapshot bool) error {
	return e.redis.start(ctx, fromSnapshot)
}

// --- redis-server ---

type redisProc struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
	exited   chan struct{}
}

func (r *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start runs redis-server in the foreground (as a child, killed with us) and waits for PING.
// Without fromSnapshot the snapshot file is removed first, so Redis starts empty.
func (r *redisProc) start(ctx context.Context, fromSnapshot bool) error {
	dump := filepath.Join(r.dir, "dump.rdb")
	if !fromSnapshot {
		if err := os.Remove(dump); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	} else if _, err := os.Stat(dump); err != nil {
		return fmt.Errorf("chaos: no redis snapshot to start from: %w", err)
	}
	cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--logfile", filepath.Join(r.dir, "redis.log"))
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		if redisPing(r.addr()) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("chaos: redis-server exited at start (see %s)", filepath.Join(r.dir, "redis.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("chaos: redis-server did not answer PING within 30 s")
		}
	}
}

// wait waits up to d for the process to exit.
func (r *redisProc) wait(d time.Duration) {
	if r.exited == nil {
		return
	}
	select {
	case <-r.exited:
	case <-time.After(d):
	}
}

func (r *redisProc) kill() {
	if r.cmd == nil {
		return
	}
	select {
	case <-r.exited:
	default:
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// redisPing answers whether a Redis at addr replies to PING (a loading Redis answers -LOADING).
func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	return bytes.HasPrefix(buf[:n], []byte("+PONG"))
}

// --- PostgreSQL ---

func (e *Env) createDatabase(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(cctx, e.pgAdminURL)
	if err != nil {
		return fmt.Errorf("chaos: connect to %s: %w", redactURL(e.pgAdminURL), err)
	}
	defer admin.Close(context.Background())
	name := "waitroom_chaos_" + randomHex(6)
	if _, err := admin.Exec(cctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("chaos: create database: %w", err)
	}
	e.dbName = name
	u, err := withDatabase(e.pgAdminURL, name, "")
	if err != nil {
		return err
	}
	if e.db, err = pgx.Connect(cctx, u); err != nil {
		return fmt.Errorf("chaos: connect to the run's database: %w", err)
	}
	return nil
}

func dropDatabase(ctx context.Context, adminURL, name string) error {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	return err
}

// withDatabase returns server URL u with the database name replaced and, when hostPort is not
// empty, the host too.
func withDatabase(u, name, hostPort string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	p.Path = "/" + name
	if hostPort != "" {
		p.Host = hostPort
	}
	return p.String(), nil
}

func hostOf(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	h := p.Host
	if p.Port() == "" {
		h = net.JoinHostPort(p.Hostname(), "5432")
	}
	return h, nil
}

func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable url)"
	}
	return p.Redacted()
}

// --- serve instances ---

type instance struct {
	index   int
	bin     string
	env     []string
	addr    string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs `waitroom serve --addr` and waits until /readyz answers 200.
func (in *instance) start(ctx context.Context) error {
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(in.bin, "serve", "--addr", in.addr)
	cmd.Env = in.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start instance %d: %w", in.index, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	in.mu.Lock()
	in.cmd, in.exited = cmd, exited
	in.mu.Unlock()
	deadline := time.Now().Add(45 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get("http://" + in.addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("chaos: instance %d exited at start: %s", in.index, tail(in.logPath, 5))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: instance %d not ready within 45 s: %s", in.index, tail(in.logPath, 5))
		}
	}
}

func (in *instance) signal(sig syscall.Signal) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return errors.New("not running")
	}
	return in.cmd.Process.Signal(sig)
}

// waitExit waits up to d for the process to exit and reports whether it did.
func (in *instance) waitExit(d time.Duration) bool {
	in.mu.Lock()
	ch := in.exited
	in.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// exitedNow reports whether the process has exited (or never started).
func (in *instance) exitedNow() bool {
	in.mu.Lock()
	ch := in.exited
	in.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGCONT (it may be stopped), SIGTERM, SIGKILL after 15 s.
func (in *instance) stop() {
	in.mu.Lock()
	cmd, ch := in.cmd, in.exited
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-ch:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-ch
	}
}

// tail returns the last n lines of a file, joined with " | ".
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// childAttr makes a child process die with us even when we are killed (Pdeathsig), in its own
// process group so that a Ctrl-C in the terminal reaches only us and we stop it in order.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

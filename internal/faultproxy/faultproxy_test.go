package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves one line-echo server and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func TestHoldAndRelease(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string, within time.Duration) error {
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return err
		}
		got, err := r.ReadString('\n')
		if err == nil && got != msg+"\n" {
			t.Fatalf("echo = %q, want %q", got, msg)
		}
		return err
	}
	if err := roundTrip("one", 5*time.Second); err != nil {
		t.Fatalf("passing: %v", err)
	}
	p.Hold()
	if err := roundTrip("two", 200*time.Millisecond); err == nil {
		t.Fatal("an answer came through a held proxy")
	}
	// A new connection is accepted while held (the fault is silence, not refusal).
	c2, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial while held: %v", err)
	}
	c2.Close()
	p.Release()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after Release: %q, %v; want the held bytes", got, err)
	}
	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if err := roundTrip("three", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("a round trip with 100 ms each way took %v", d)
	}
	p.SetDelay(0)
	// The answer to "commit" is held; the request went through.
	p.HoldWhen(func(b []byte, toClient bool) bool { return toClient && strings.Contains(string(b), "commit") })
	if err := roundTrip("commit", 200*time.Millisecond); err == nil {
		t.Fatal("the answer that should be held came through")
	}
	p.Release()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "commit\n" {
		t.Fatalf("after Release: %q, %v", got, err)
	}
	if err := roundTrip("commit", 5*time.Second); err != nil {
		t.Fatalf("the trigger fired twice: %v", err)
	}
}

// TestFreeze: the connection open at the freeze goes silent both ways and stays open; a
// connection made afterwards is forwarded.
func TestFreeze(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	roundTrip := func(c net.Conn, r *bufio.Reader, msg string, within time.Duration) error {
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return err
		}
		_, err := r.ReadString('\n')
		return err
	}
	old, oldR := dial()
	if err := roundTrip(old, oldR, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	if err := roundTrip(old, oldR, "frozen", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a frozen connection answered (or closed): %v", err)
	}
	p.Release() // does not resume a frozen connection
	if err := roundTrip(old, oldR, "still", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a frozen connection answered after Release: %v", err)
	}
	fresh, freshR := dial()
	if err := roundTrip(fresh, freshR, "after", 5*time.Second); err != nil {
		t.Fatalf("a connection made after the freeze: %v", err)
	}
}

// recorder serves a line-echo server that also reports every line it receives, and returns
// its address and the lines as they arrive.
func recorder(t *testing.T) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 64)
	var conns sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			conns.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- strings.TrimSuffix(line, "\n")
					_, _ = c.Write([]byte(line))
				}
			})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	return ln.Addr().String(), got
}

// client is one connection through a proxy, sending and reading lines.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialProxy(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *client) send(msg string) {
	c.t.Helper()
	_ = c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write([]byte(msg + "\n")); err != nil {
		c.t.Fatalf("send %q: %v", msg, err)
	}
}

// read returns the next line within d, or the error (a timeout when nothing came).
func (c *client) read(d time.Duration) (string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func (c *client) mustRead(d time.Duration, want string) {
	c.t.Helper()
	got, err := c.read(d)
	if err != nil || got != want {
		c.t.Fatalf("read = %q, %v; want %q", got, err, want)
	}
}

func (c *client) silent(d time.Duration) {
	c.t.Helper()
	got, err := c.read(d)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("read = %q, %v; want nothing for %v", got, err, d)
	}
}

// arrives waits for the target to receive want, within d.
func arrives(t *testing.T, got <-chan string, want string, d time.Duration) {
	t.Helper()
	select {
	case s := <-got:
		if s != want {
			t.Fatalf("the target got %q, want %q", s, want)
		}
	case <-time.After(d):
		t.Fatalf("%q did not reach the target within %v", want, d)
	}
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestHang: the requests reach the target, its answers wait, on the connections open and on
// new ones; Release delivers them in order.
func TestHang(t *testing.T) {
	addr, got := recorder(t)
	p := newProxy(t, addr)
	c := dialProxy(t, p)
	c.send("one")
	arrives(t, got, "one", 5*time.Second)
	c.mustRead(5*time.Second, "one")

	p.Hang()
	c.send("two")
	arrives(t, got, "two", 5*time.Second) // the request passes
	c.send("three")
	arrives(t, got, "three", 5*time.Second)
	c.silent(300 * time.Millisecond) // the answers do not
	fresh := dialProxy(t, p)         // accepted, not refused
	fresh.send("four")
	arrives(t, got, "four", 5*time.Second)
	fresh.silent(100 * time.Millisecond)

	p.Release()
	c.mustRead(5*time.Second, "two")
	c.mustRead(5*time.Second, "three")
	fresh.mustRead(5*time.Second, "four")
	c.send("five")
	c.mustRead(5*time.Second, "five")
}

// TestDelays: SetDelays(0, d) delays only the answers, SetDelays(d, 0) only the requests, and
// lifting a delay delivers at once what waited under it.
func TestDelays(t *testing.T) {
	addr, got := recorder(t)
	p := newProxy(t, addr)
	c := dialProxy(t, p)
	c.send("warm")
	c.mustRead(5*time.Second, "warm")
	<-got

	const d = 400 * time.Millisecond
	p.SetDelays(0, d)
	start := time.Now()
	c.send("down")
	arrives(t, got, "down", d/2) // the request is not delayed
	c.mustRead(5*time.Second, "down")
	if took := time.Since(start); took < d {
		t.Fatalf("an answer delayed %v came after %v", d, took)
	}

	p.SetDelays(d, 0)
	start = time.Now()
	c.send("up")
	arrives(t, got, "up", 5*time.Second)
	if took := time.Since(start); took < d {
		t.Fatalf("a request delayed %v reached the target after %v", d, took)
	}
	c.mustRead(d/2, "up") // the answer is not delayed

	// An hour's latency on the answers; lifting it delivers the waiting answer at once.
	p.SetDelays(0, time.Hour)
	c.send("held")
	arrives(t, got, "held", 5*time.Second)
	c.silent(200 * time.Millisecond)
	p.SetDelays(0, 0)
	c.mustRead(2*time.Second, "held")

	// SetDelay delays both ways.
	p.SetDelay(d / 2)
	start = time.Now()
	c.send("both")
	c.mustRead(5*time.Second, "both")
	if took := time.Since(start); took < d {
		t.Fatalf("a round trip with %v each way took %v", d/2, took)
	}
}

// TestCut: the open connection is closed, new ones are refused, held bytes are dropped with
// their connection; Restore listens on the same address and forwards again.
func TestCut(t *testing.T) {
	addr, got := recorder(t)
	p := newProxy(t, addr)
	c := dialProxy(t, p)
	c.send("one")
	c.mustRead(5*time.Second, "one")
	<-got
	p.Hang()
	c.send("lost")
	arrives(t, got, "lost", 5*time.Second)

	p.Cut()
	if s, err := c.read(5 * time.Second); err == nil {
		t.Fatalf("a cut connection read %q", s)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a cut connection stayed open")
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Fatal("a cut proxy accepted a connection")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a cut proxy: %v, want connection refused", err)
	}
	p.Cut() // twice is fine

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restore(); err != nil {
		t.Fatalf("Restore of a proxy that is not cut: %v", err)
	}
	p.Release()
	fresh := dialProxy(t, p)
	fresh.send("two")
	arrives(t, got, "two", 5*time.Second)
	fresh.mustRead(5*time.Second, "two")

	// Closed while cut: Close ends it, Restore is refused.
	p.Cut()
	if err := p.Close(); err != nil {
		t.Fatalf("Close of a cut proxy: %v", err)
	}
	if err := p.Restore(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restore after Close: %v, want ErrClosed", err)
	}
}

// TestCloseEndsWaits: Close does not wait out a delay, a hold or a frozen link (goleak, in
// TestMain, checks that nothing is left).
func TestCloseEndsWaits(t *testing.T) {
	for name, fault := range map[string]func(p *Proxy){
		"delay":  func(p *Proxy) { p.SetDelays(0, time.Hour) },
		"hang":   func(p *Proxy) { p.Hang() },
		"freeze": func(p *Proxy) { p.Freeze() },
	} {
		t.Run(name, func(t *testing.T) {
			addr, got := recorder(t)
			p := newProxy(t, addr) // closed below; the cleanup's second Close does nothing
			c := dialProxy(t, p)
			c.send("x")
			c.mustRead(5*time.Second, "x")
			<-got
			fault(p)
			c.send("waits")
			if name != "freeze" {
				arrives(t, got, "waits", 5*time.Second)
			}
			c.silent(100 * time.Millisecond)
			closed := make(chan error, 1)
			go func() { closed <- p.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Close waited for the %s", name)
			}
		})
	}
}

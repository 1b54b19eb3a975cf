package faultproxy

import (
	"bufio"
	"net"
	"strings"
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

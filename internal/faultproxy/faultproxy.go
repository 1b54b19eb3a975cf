// Package faultproxy is a TCP proxy for tests and the chaos suite that injects the faults of a
// store, each on and off at will:
//
//   - Hold: a store that is reachable but does not answer. Connections are accepted and every
//     byte, both ways, waits in the proxy (a network that drops packets, a server stopped with
//     SIGSTOP). HoldWhen holds from a chosen chunk on ("the answer to COMMIT is lost").
//   - Hang: requests reach the store, its answers wait in the proxy (a server stuck after it
//     read the query).
//   - SetDelay, SetDelays: latency, each chunk forwarded a fixed time after it was read, both
//     ways or one way (a slow network or store).
//   - Cut: every connection closed and new ones refused, as a store that went away; Restore
//     listens again on the same address.
//   - Freeze: the connections open now go silent for good while new ones pass (a load
//     balancer's path to an instance that stopped answering).
//
// Release lets held bytes through, in order. Lifting a delay or a hold delivers what waited at
// once; nothing is dropped while a connection lives.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// The two directions of a link, as toxiproxy names them: upstream is the client's bytes on
// their way to the target, downstream the target's on their way to the client.
const (
	upstream   = 0
	downstream = 1
)

// Proxy forwards connections from its address to a target address.
type Proxy struct {
	target string
	addr   string // the listening address, kept across Cut and Restore

	mu      sync.Mutex
	ln      net.Listener     // nil while cut or closed
	held    [2]bool          // by direction
	release [2]chan struct{} // by direction: closed by Release; replaced by Hold and Hang
	delay   [2]time.Duration // by direction
	changed chan struct{}    // closed and replaced when a fault changes: waiting chunks look again
	when    func(chunk []byte, toClient bool) bool
	conns   map[net.Conn]*link // each side of a link -> the link
	closed  bool
	wg      sync.WaitGroup
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	frozen chan struct{} // closed by Freeze: silent until gone
	gone   chan struct{} // closed by Cut and Close: the link's goroutines end
}

// ErrClosed is returned by Restore after Close.
var ErrClosed = errors.New("faultproxy: closed")

// New listens on a free loopback port and forwards every connection to target (host:port).
// Errors: the listener's.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, addr: ln.Addr().String(), target: target, changed: make(chan struct{}),
		conns: map[net.Conn]*link{}}
	for d := range p.release {
		p.release[d] = make(chan struct{})
		close(p.release[d])
	}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the proxy's host:port. It does not change, Cut and Restore included.
func (p *Proxy) Addr() string { return p.addr }

// Hold stops forwarding: connections are still accepted, and bytes sent either way wait in
// the proxy until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdLocked(upstream, downstream)
}

// Hang holds the target's answers while the client's bytes still reach it: connections are
// accepted, requests are delivered, and what the target sends back waits in the proxy until
// Release.
func (p *Proxy) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdLocked(downstream)
}

func (p *Proxy) holdLocked(dirs ...int) {
	for _, d := range dirs {
		if !p.held[d] {
			p.held[d] = true
			p.release[d] = make(chan struct{})
		}
	}
	p.changedLocked()
}

// Release forwards again, both ways, held bytes first. It ends Hold, Hang and a HoldWhen that
// fired.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d := range p.held {
		if p.held[d] {
			p.held[d] = false
			close(p.release[d])
		}
	}
}

// HoldWhen holds the proxy (as Hold) just before it would forward the first chunk for which
// match returns true, that chunk included: "hold the answer after a write", e.g. the server's
// reply to a COMMIT. toClient is true for bytes from the target. The trigger fires once.
func (p *Proxy) HoldWhen(match func(chunk []byte, toClient bool) bool) {
	p.mu.Lock()
	p.when = match
	p.mu.Unlock()
}

// Freeze stops forwarding on the connections open now, without closing them: bytes sent
// either way on them are swallowed until Cut or Close (Release does not resume them).
// Connections accepted afterwards are forwarded as usual.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.conns {
		closeOnce(l.frozen)
	}
	p.changedLocked()
}

// SetDelay makes every chunk, both ways, wait d (from when the proxy read it) before it is
// forwarded. 0 ends the delay.
func (p *Proxy) SetDelay(d time.Duration) { p.SetDelays(d, d) }

// SetDelays makes every chunk wait (from when the proxy read it) up before it is forwarded to
// the target and down before it is forwarded to the client: SetDelays(0, d) is a latency of d
// on every answer. A chunk already waiting takes the new delay at once, so lifting a delay
// delivers what waited.
func (p *Proxy) SetDelays(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = [2]time.Duration{up, down}
	p.changedLocked()
}

// Cut closes every connection and stops listening: new connections are refused (ECONNREFUSED)
// until Restore. Bytes held or delayed on the closed connections are dropped with them.
func (p *Proxy) Cut() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.cutLinksLocked()
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

// Restore ends Cut: the proxy listens on its address again. It does nothing when the proxy is
// not cut. Errors: ErrClosed after Close; the listener's (the port was taken meanwhile).
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Close stops listening, cuts every connection and waits for the proxy's goroutines. Errors:
// the listener's Close (none when the proxy was cut or already closed).
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.ln = nil
	p.cutLinksLocked()
	p.mu.Unlock()
	var err error
	if ln != nil {
		err = ln.Close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) cutLinksLocked() {
	for c, l := range p.conns {
		_ = c.Close()
		closeOnce(l.gone)
	}
}

func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// closeOnce closes ch unless it is closed; the caller holds p.mu.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// track registers c as one side of l; false (and c closed) when l was cut or the proxy closed.
func (p *Proxy) track(c net.Conn, l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-l.gone:
		_ = c.Close()
		return false
	default:
	}
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = l
	return true
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		live := p.ln == ln // not cut or closed since Accept returned
		p.mu.Unlock()
		l := &link{frozen: make(chan struct{}), gone: make(chan struct{})}
		if !live || !p.track(in, l) {
			_ = in.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(in, l)
	}
}

func (p *Proxy) serve(in net.Conn, l *link) {
	defer p.wg.Done()
	out, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(out, l) {
		_ = in.Close()
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(out, in, upstream, l) }()
	go func() { defer both.Done(); p.pipe(in, out, downstream, l) }()
	both.Wait()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, each forwarded once its direction is not held and
// its delay has passed; either side ending closes both. A frozen link swallows every chunk
// (and stays open) until it is cut.
func (p *Proxy) pipe(dst, src net.Conn, dir int, l *link) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await(buf[:n], time.Now(), dir, l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a cut: either way this direction is over
			return
		}
	}
}

// await blocks until chunk, read at read, may be forwarded in direction dir: true then, false
// when the link is gone (cut or closed).
func (p *Proxy) await(chunk []byte, read time.Time, dir int, l *link) bool {
	p.mu.Lock()
	if p.when != nil && p.when(chunk, dir == downstream) {
		p.when = nil
		p.holdLocked(upstream, downstream)
	}
	p.mu.Unlock()
	for {
		p.mu.Lock()
		release, delay, changed := p.release[dir], p.delay[dir], p.changed
		p.mu.Unlock()
		select {
		case <-release:
		case <-l.frozen:
		case <-l.gone:
			return false
		}
		select {
		case <-l.frozen:
			<-l.gone // silent, and open, until cut
			return false
		default:
		}
		wait := time.Until(read.Add(delay))
		if wait <= 0 {
			return true
		}
		// The latency injected, not a synchronisation: the wait ends early when a fault
		// changes (a delay lifted, a hold added), and the chunk looks again.
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
			return true
		case <-changed:
			timer.Stop()
		case <-l.gone:
			timer.Stop()
			return false
		}
	}
}

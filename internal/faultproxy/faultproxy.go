// Package faultproxy is a TCP proxy for tests that injects the faults of a store that is
// reachable but does not answer: Hold accepts connections and holds every byte (both ways)
// without closing anything, as a network that drops packets or a server stopped with SIGSTOP
// would; SetDelay adds latency to every chunk (a slow database). Release lets held bytes
// through, in order. Freeze silences only the connections open at the time, for good, while
// new ones pass: a load balancer's path to an instance that stopped answering, where a client
// that connects again reaches another. It is for tests and the chaos suite only.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its address to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	held    bool
	release chan struct{} // closed by Release; replaced by Hold
	delay   time.Duration
	when    func(chunk []byte, toClient bool) bool
	conns   map[net.Conn]chan struct{} // each side of a link -> its frozen channel (closed by Freeze)
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// New listens on a free loopback port and forwards every connection to target (host:port).
// Errors: the listener's.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, release: make(chan struct{}), conns: map[net.Conn]chan struct{}{},
		done: make(chan struct{})}
	close(p.release)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Hold stops forwarding: connections are still accepted, and bytes sent either way wait in
// the proxy until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		p.held = true
		p.release = make(chan struct{})
	}
}

// Release forwards again, held bytes first.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.release)
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
// either way on them are swallowed until Close (Release does not resume them). Connections
// accepted afterwards are forwarded as usual.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, frozen := range p.conns {
		select {
		case <-frozen:
		default:
			close(frozen)
		}
	}
}

// SetDelay makes every chunk wait d (from when the proxy read it) before it is forwarded.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Close stops listening, cuts every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if p.held {
		p.held = false
		close(p.release)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track registers c as one side of the link whose frozen channel is frozen.
func (p *Proxy) track(c net.Conn, frozen chan struct{}) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = frozen
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		frozen := make(chan struct{})
		if !p.track(in, frozen) {
			return
		}
		p.wg.Add(1)
		go p.serve(in, frozen)
	}
}

func (p *Proxy) serve(in net.Conn, frozen chan struct{}) {
	defer p.wg.Done()
	out, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(out, frozen) {
		_ = in.Close()
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(out, in, false, frozen) }()
	go func() { defer both.Done(); p.pipe(in, out, true, frozen) }()
	both.Wait()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, each waiting for Release and its delay; either
// side ending closes both. toClient is true when src is the target. Once frozen is closed,
// chunks are swallowed (and the link is left open) until Close.
func (p *Proxy) pipe(dst, src net.Conn, toClient bool, frozen chan struct{}) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read := time.Now()
			p.mu.Lock()
			if p.when != nil && p.when(buf[:n], toClient) {
				p.when = nil
				if !p.held {
					p.held = true
					p.release = make(chan struct{})
				}
			}
			release, delay := p.release, p.delay
			p.mu.Unlock()
			<-release
			select {
			case <-frozen:
				<-p.done // silent, and open, until Close
				return
			default:
			}
			if wait := time.Until(read.Add(delay)); wait > 0 {
				time.Sleep(wait) // the latency injected, not a synchronisation
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

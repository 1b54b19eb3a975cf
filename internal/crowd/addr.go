package crowd

import (
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Source addresses (--user-addrs, --bot-addrs): the server limits each client, and a client is
// its address (package clientaddr: an IPv4 address, an IPv6 /64). A run whose users all come
// from one address is one client to the server, far over its limits per client; a run that
// must look like a real crowd binds each connection's source address instead. On Linux the
// whole of 127.0.0.0/8 is local, so "127.0.1.0/24" gives 256 clients on one machine without
// any set-up, and the server, without --trusted-proxies, tells them apart.
//
// An addrPlan hands client i the prefix's address i mod its size (all of them, the network
// and broadcast forms included: loopback has neither). Each address has its own http.Client
// (a dialer's LocalAddr is per Transport), made on first use and kept for the run.

// maxPlanAddrs bounds the addresses of a plan: each one used costs a Transport and its pool.
const maxPlanAddrs = 1 << 16

// addrPlan is a range of source addresses. The zero value means "let the system choose".
type addrPlan struct {
	prefix netip.Prefix
	size   int // addresses in prefix, at most maxPlanAddrs

	concurrency int           // keep-alive pool size of each client
	maxConns    int           // connections of each client to a host (0: no cap)
	timeout     time.Duration // request timeout of each client
	mu          sync.Mutex
	clients     map[int]*http.Client // by address index
}

// parsePrefix parses "127.0.1.0/24" or a single address ("127.0.2.1" = a /32). An empty
// string is the zero Prefix (no plan). Errors: not a CIDR or address, or an IPv6 prefix wider
// than /112 (more than 65,536 addresses: the plan never uses more).
func parsePrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR (127.0.1.0/24) nor an address", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p = p.Masked()
	if p.Addr().BitLen()-p.Bits() > 16 && p.Addr().Is6() {
		return netip.Prefix{}, fmt.Errorf("%s: at most 65,536 addresses (a /112 or longer)", s)
	}
	return p, nil
}

// newAddrPlan returns the plan of prefix (the zero Prefix: no plan) for n clients making up
// to concurrency requests at once in all; each address's keep-alive pool holds twice its
// share of them (at least 4), and its requests time out after timeout.
func newAddrPlan(prefix netip.Prefix, concurrency, n int, timeout time.Duration) *addrPlan {
	if !prefix.IsValid() {
		return &addrPlan{}
	}
	p := &addrPlan{prefix: prefix, size: min(1<<min(prefix.Addr().BitLen()-prefix.Bits(), 16), maxPlanAddrs),
		timeout: timeout, clients: map[int]*http.Client{}}
	p.concurrency = max(4, 2*concurrency/max(1, p.distinct(n)))
	return p
}

// active reports whether the plan binds source addresses.
func (p *addrPlan) active() bool { return p.size > 0 }

// addr returns the address of client i (i >= 0).
func (p *addrPlan) addr(i int) netip.Addr {
	return offset(p.prefix.Addr(), i%p.size)
}

// offset returns a + n.
func offset(a netip.Addr, n int) netip.Addr {
	b := a.AsSlice()
	x := new(big.Int).SetBytes(b)
	x.Add(x, big.NewInt(int64(n)))
	out := x.FillBytes(make([]byte, len(b)))
	r, _ := netip.AddrFromSlice(out) // same length as a's
	return r
}

// distinct is the number of distinct addresses n clients use.
func (p *addrPlan) distinct(n int) int { return min(n, p.size) }

// client returns the http.Client of client i's address (nil without a plan).
func (p *addrPlan) client(i int) *http.Client {
	if !p.active() {
		return nil
	}
	k := i % p.size
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[k]
	if c == nil {
		c = newBoundClient(p.addr(k), p.concurrency, p.timeout)
		c.Transport.(*http.Transport).MaxConnsPerHost = p.maxConns
		p.clients[k] = c
	}
	return c
}

// closeIdle closes the idle connections of every client made.
func (p *addrPlan) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		c.CloseIdleConnections()
	}
}

// newBoundClient is newClient whose connections leave from source address src.
func newBoundClient(src netip.Addr, concurrency int, timeout time.Duration) *http.Client {
	c := newClient(concurrency, timeout)
	c.Transport.(*http.Transport).DialContext = (&net.Dialer{
		Timeout:   min(timeout, 10*time.Second),
		KeepAlive: 30 * time.Second,
		LocalAddr: &net.TCPAddr{IP: src.AsSlice()},
	}).DialContext
	return c
}

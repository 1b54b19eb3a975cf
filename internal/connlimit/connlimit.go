// Package connlimit bounds the connections of an instance's listeners (the API, the gate's
// listener, --metrics-addr), so that no client, and no crowd of clients, can take the
// instance's open files and with them its health checks (issue 20: one address holding
// ~10,000 idle keep-alive connections filled the 20,000 files: "accept4: too many open
// files", /healthz timing out). One Limiter counts the connections of every listener of the
// process together (a file is a file whichever listener accepted it); Listen wraps each.
//
// # The rules, at each accept
//
//   - Per client: a client (package clientaddr's key of the connection's peer: an IPv4
//     address, an IPv6 /64) holds at most MaxConnsPerClient connections. A peer that is a
//     trusted proxy (Config.Trusted) carries many clients and is not capped per client; its
//     connections count in the total like any other. A client at its cap that holds an idle
//     keep-alive connection has its own oldest idle one closed to make room (a large NAT's
//     pages go on working); one whose connections are all busy is refused.
//   - In total: MaxConns connections at most, below the process's open-file limit
//     (DefaultMaxConnsFor) so that accept never fails for want of files. The last Reserve of
//     them form the reserve: a connection accepted when the others are taken is marked
//     (Serving tells a handler), lives at most ReserveTimeout reading, and one client holds at most an
//     eighth of the reserve; what its requests may do is the server's choice (the app answers
//     only health checks, /metrics and admin calls on it, and 503 with
//     Retry-After to the others). Beyond MaxConns a connection is refused.
//   - Idle first: from BusyAt connections on (half of MaxConns) the instance is busy, and
//     keep-alive connections idle for BusyIdleTimeout are closed, oldest first, by a timer
//     armed while busy and at each accept (the server's own IdleTimeout, 120 s, holds
//     otherwise). At the ordinary cap the oldest idle connection, whatever its age, is
//     closed to make room before the reserve is used. When accept fails for want of files
//     all the same (files taken by something else: outgoing connections, the pools), the
//     oldest idle connections are closed too.
//
// # Push first
//
// A waiting page holds its push connection (a WebSocket, or an SSE stream) and, for as long as
// the browser keeps it, the keep-alive connection its join came over, which it no longer uses:
// two files per person in line (issue 22: an instance out of files at ~7,500 waiting users, not
// at its push cap of 16,000). A client that holds a push connection (a hijacked one, or one
// marked with MarkPush) is "pushing", and its idle keep-alive connections go first: while busy
// they are closed after PushIdleTimeout (1 s) instead of BusyIdleTimeout, and at the cap, and
// when files run out, they are shed before any other idle connection. A polling page, whose
// keep-alive connection carries its next poll, keeps it longer. (Pushing is per client: behind
// one address, one person's push connection marks the idle connections of the others too; that
// costs them a new connection for their next request, and only under pressure.)
//
// A connection is "idle" between two requests of keep-alive, as http.Server reports it
// (Limiter.ConnState); a request in flight, an SSE stream or a hijacked WebSocket is never
// shed. A connection that has not sent its first request SilentGrace after its accept is
// "silent": at the ordinary cap, idle ones and then silent ones, the oldest first, are closed
// until a new connection has an ordinary place, so that connections that never ask anything
// (from as many addresses as an attacker has) can neither fill the reserve that health checks
// need (a black-box run of issue 20 did, with 9 addresses) nor keep a join on the reserve,
// where it is answered 503 (150 silent sockets from 150 addresses did, closed one at a time).
// Only a new connection whose client holds no silent one closes silent ones, so that an
// attacker's own reconnects cannot keep every place younger than SilentGrace (10 addresses of
// 20 sockets did); and the silent ones of a client holding more than SilentCrowd go however
// young, so that reconnects that keep every place younger than SilentGrace (200 sockets from
// 1 or 20 addresses, each closed after 0.4 s and opened again) do not keep joins out either.
// Otherwise the server's ReadHeaderTimeout ends a silent connection. Closing an idle
// connection races a request the client may be
// sending on it at that moment, as every keep-alive timeout does: clients retry a request on a
// reused connection that closed before any answer (RFC 9110 section 9.2.2), and the oldest
// idle connection is the one least likely to be in use.
//
// # Refusing
//
// A connection refused is accepted and closed at once, without reading from it: it costs
// the instance an accept and a close, and no goroutine, buffer or timer, so that a flood of
// them cannot hold files for the ReadHeaderTimeout as a connection read from would. (A 503
// needs the request read first; the reserve is where the instance still does that.)
//
// golang.org/x/net/netutil.LimitListener was the library to beat: it caps only the total,
// per listener, and blocks in Accept when full, which leaves health checks waiting in the
// kernel's backlog — the failure this package exists to prevent.
//
// # The server's own answers
//
// The connections are where http.Server's own answers can be seen: to a request whose
// framing does not parse it writes a plain-text 400, 431, 501 or 505 straight to the
// connection, before any handler (and an empty 417 to an Expect it does not know), and offers
// no hook to answer otherwise. Config.ServerAnswer
// may replace such a Write (the app answers a problem, as to every other client mistake);
// a handler marks its connection as answering (Serving), and the Writes of an answering or
// hijacked connection are never shown to it.
package connlimit

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/waitroom/waitroom/internal/clientaddr"
)

// Reason says why a connection was refused or shed (the metrics' reason label).
type Reason string

const (
	// ReasonClient: the client holds MaxConnsPerClient connections (refused), or its own
	// oldest idle connection made room for its new one (shed).
	ReasonClient Reason = "client"
	// ReasonTotal: the instance holds MaxConns connections (refused; or the client holds its
	// share of the reserve), or the oldest idle connection made room below the reserve (shed).
	ReasonTotal Reason = "total"
	// ReasonBusy: idle for BusyIdleTimeout while the instance was busy (shed).
	ReasonBusy Reason = "busy"
	// ReasonFiles: accept failed for want of files (shed).
	ReasonFiles Reason = "files"
	// ReasonSilent: a connection that sent no request within SilentGrace made room (shed).
	ReasonSilent Reason = "silent"
	// ReasonPush: an idle keep-alive connection of a client holding a push connection, idle
	// for PushIdleTimeout while the instance was busy (shed).
	ReasonPush Reason = "push"
)

// Defaults of Config.
const (
	// DefaultMaxConnsPerClient is twice event.DefaultPushPerClient (500 live pages behind one
	// address): each waiting page of a large NAT holds its WebSocket and, for a while, the
	// keep-alive connection its join came over. One address then holds 1,000 of the 18,000
	// connections of a 20,000-file instance, and idle ones of its own go first.
	DefaultMaxConnsPerClient = 1000
	// DefaultReserve: connections kept for health checks and admin calls. A probe or an admin
	// call needs one for well under a second; 64 is far beyond what the probes of a load
	// balancer and Kubernetes, a Prometheus scrape and an operator open at once.
	DefaultReserve = 64
	// DefaultReserveTimeout bounds reading on a connection of the reserve: a health check
	// takes milliseconds; an admin call's largest body (1 MiB) well under a second on any
	// link fit for an admin (httpapi.DefaultBodyTimeout is 10 s for all requests).
	DefaultReserveTimeout = 5 * time.Second
	// DefaultBusyIdleTimeout: a page that moved to its WebSocket after joining no longer uses
	// its keep-alive connection after a second or two; 5 s keeps the connection of a page
	// polling every few seconds, and frees the others' files 24 times sooner than the 120 s
	// of a quiet instance (issue 22: each waiting user held two files).
	DefaultBusyIdleTimeout = 5 * time.Second
	// DefaultPushIdleTimeout: the idle keep-alive connection of a client holding a push
	// connection is not used again while the push connection lives (a page on its WebSocket
	// asks nothing over HTTP); a second covers a request that follows its answer at once.
	DefaultPushIdleTimeout = time.Second
	// DefaultMaxConns is the cap when the open-file limit is unknown (unlimited).
	DefaultMaxConns = 60_000
	// SilentGrace is how long a new connection may take to send its first request before it
	// may be closed to make room (a health check sends its at once; a browser within a round
	// trip or two).
	SilentGrace = 500 * time.Millisecond
	// SilentCrowd is how many silent connections a client may hold and keep SilentGrace for
	// them: beyond it, at the ordinary cap, a newcomer without silent ones of its own closes
	// theirs however young, the oldest first. A browser opens a handful at once (six to a
	// host over HTTP/1.1); an attacker who keeps every place younger than SilentGrace by
	// reconnecting (200 sockets from one address, each closed after 0.4 s and opened again)
	// needs many more. From as many addresses as places, each within it, it is not told apart
	// from a crowd of slow clients.
	SilentCrowd = 6
)

// Files kept free of connections under the open-file limit (see DefaultMaxConnsFor): the
// database and Redis pools, the listeners, log files, the gate's connections to its origins,
// and what Go and the system open.
const (
	reservedFiles = 512
	reservedShare = 0.1
)

// DefaultMaxConnsFor is the default MaxConns of a process allowed limit open files (0 =
// unknown: DefaultMaxConns): Below(limit, 512, 0.1). With the limit of 20,000 files: 18,000
// connections, 2,000 files for everything else. The push hub's cap (push.DefaultMaxConnsFor,
// 16,000 there) is within it, so that 2,000 connections stay for joins, polls, health checks
// and admin calls while push is full.
func DefaultMaxConnsFor(limit uint64) int {
	if limit == 0 {
		return DefaultMaxConns
	}
	return Below(limit, reservedFiles, reservedShare)
}

// Below is what a process allowed limit open files has left when it keeps the larger of keep
// files and a share of limit (0..1) free: at least 1, at most 2^30.
func Below(limit, keep uint64, share float64) int {
	kept := max(keep, uint64(float64(limit)*share))
	if limit <= kept {
		return 1
	}
	return int(min(limit-kept, 1<<30))
}

// OpenFileLimit is the process's soft limit of open files (RLIMIT_NOFILE), 0 when unknown or
// unlimited. (Go raises the soft limit to the hard one at start on Linux.)
func OpenFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == ^uint64(0) {
		return 0
	}
	return r.Cur
}

// Config configures a Limiter. Zero fields take the defaults named on them.
type Config struct {
	// MaxConns caps the connections of all the Limiter's listeners together, the reserve
	// included. Defaults to DefaultMaxConnsFor(OpenFileLimit()).
	MaxConns int
	// MaxConnsPerClient caps one client's connections (trusted proxies excepted). Defaults to
	// DefaultMaxConnsPerClient.
	MaxConnsPerClient int
	// Reserve is how many of MaxConns are kept for the reserve. Defaults to the smaller of
	// DefaultReserve and MaxConns/8; negative: none.
	Reserve int
	// ReserveTimeout bounds reading on a connection of the reserve, from its accept (every
	// read deadline set on it is brought forward to it). Defaults to DefaultReserveTimeout.
	ReserveTimeout time.Duration
	// BusyAt is the number of connections from which the instance is busy. Defaults to
	// MaxConns/2.
	BusyAt int
	// BusyIdleTimeout is the idle time after which a keep-alive connection is closed while
	// the instance is busy. Defaults to DefaultBusyIdleTimeout.
	BusyIdleTimeout time.Duration
	// PushIdleTimeout is the idle time after which a keep-alive connection of a client holding
	// a push connection is closed while the instance is busy. Defaults to the smaller of
	// DefaultPushIdleTimeout and BusyIdleTimeout.
	PushIdleTimeout time.Duration
	// Trusted reports whether a peer is a trusted proxy (clientaddr.Resolver.Trusted), whose
	// connections are not capped per client. Nil: none is.
	Trusted func(netip.Addr) bool
	// OnRefuse, when set, is called for each connection refused, with its listener's name.
	OnRefuse func(listener string, r Reason)
	// OnShed, when set, is called for each idle connection closed, with its listener's name.
	OnShed func(listener string, r Reason)
	// Now is the clock of the idle times. Defaults to time.Now.
	Now func() time.Time
	// ServerAnswer, when set, may replace what one Write of http.Server's own puts on a
	// connection while no handler answers on it (handlers call Serving): given the name of
	// the connection's listener (Limiter.Listen) and the bytes of a Write that starts as an
	// answer with a 4xx or 5xx status, it returns those to send instead and true, or false to
	// send them as they are (package httpjson's FramingAnswer: net/http's plain-text answers
	// to a request that does not parse, as problems). It must be safe for concurrent use and
	// quick.
	ServerAnswer func(listener string, p []byte) ([]byte, bool)
}

// WithDefaults returns a copy with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConnsFor(OpenFileLimit()))
	c.MaxConnsPerClient = cmp.Or(c.MaxConnsPerClient, DefaultMaxConnsPerClient)
	if c.Reserve == 0 {
		c.Reserve = min(DefaultReserve, c.MaxConns/8)
	}
	c.Reserve = max(c.Reserve, 0)
	c.ReserveTimeout = cmp.Or(c.ReserveTimeout, DefaultReserveTimeout)
	c.BusyAt = cmp.Or(c.BusyAt, c.MaxConns/2)
	c.BusyIdleTimeout = cmp.Or(c.BusyIdleTimeout, DefaultBusyIdleTimeout)
	c.PushIdleTimeout = cmp.Or(c.PushIdleTimeout, min(DefaultPushIdleTimeout, c.BusyIdleTimeout))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MaxConns < 1 || c.MaxConnsPerClient < 1:
		return errors.New("connlimit: MaxConns and MaxConnsPerClient must be at least 1")
	case c.Reserve >= c.MaxConns:
		return errors.New("connlimit: Reserve must be below MaxConns")
	case c.BusyAt < 0 || c.ReserveTimeout < 0 || c.BusyIdleTimeout < 0 || c.PushIdleTimeout < 0:
		return errors.New("connlimit: BusyAt and the timeouts must not be negative")
	}
	return nil
}

// Limiter holds the counts of every listener it wraps. Its methods are safe for concurrent
// use.
type Limiter struct {
	cfg           Config
	ordinary      int // MaxConns - Reserve: the connections outside the reserve
	clientReserve int // a client's share of the reserve

	mu      sync.Mutex
	total   int
	clients map[string]*client // by clientaddr key; trusted proxies have none
	idle    idleList           // every idle connection of a client not pushing, the longest idle first
	pidle   idleList           // every idle connection of a pushing client, the longest idle first
	silent  idleList           // every connection that has not sent a request yet, the oldest first
	// crowding are the clients holding more than SilentCrowd silent connections (crowding).
	crowding map[*client]struct{}
	sweeper  *time.Timer // armed while busy with idle connections: closes the expired
	sweepAt  time.Time   // when the armed sweeper fires (Config.Now's time)
	sweeps   int         // the sweeper's generation: a sweep of an older one does nothing
}

// client is one client's count.
type client struct {
	n, reserve int
	silent     int      // its connections that have not sent a request yet (in Limiter.silent)
	silentOwn  idleList // the same connections, the oldest first
	pushing    int      // its push connections (hijacked, or marked)
	idle       idleList // its idle connections, the longest idle first
}

// New returns a Limiter. Errors: a field out of range.
func New(cfg Config) (*Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Limiter{cfg: cfg, ordinary: cfg.MaxConns - cfg.Reserve, clientReserve: max(1, cfg.Reserve/8),
		clients: map[string]*client{}, idle: idleList{k: linkAll}, pidle: idleList{k: linkAll},
		silent: idleList{k: linkSilent}, crowding: map[*client]struct{}{}}, nil
}

// Config returns the Limiter's configuration, defaults applied.
func (l *Limiter) Config() Config { return l.cfg }

// Open returns the number of connections open on all the listeners.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Idle returns the number of idle keep-alive connections on all the listeners.
func (l *Limiter) Idle() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle.n + l.pidle.n
}

// IdlePushing returns the number of idle keep-alive connections of clients that hold a push
// connection (counted in Idle too).
func (l *Limiter) IdlePushing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pidle.n
}

// Listen returns ln limited by l; name names it to OnRefuse and OnShed. The server that
// serves it must report its connections' states to l.ConnState, and may set
// http.Server.ConnContext to ConnContext to learn which requests come over the reserve.
func (l *Limiter) Listen(ln net.Listener, name string) *Listener {
	return &Listener{Listener: ln, lim: l, name: name}
}

// ConnState is http.Server.ConnState for the servers of l's listeners: it tells l which
// connections are idle.
func (l *Limiter) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*Conn)
	if !ok || c.lim != l {
		return
	}
	switch s {
	case http.StateIdle:
		c.answering.Store(false) // the answer is out: the next Write may be http.Server's own
		now := l.cfg.Now()
		l.mu.Lock()
		if !c.released {
			l.unsilence(c)
			l.unidle(c) // idle again: to the back
			c.idleSince = now
			if c.cl != nil && c.cl.pushing > 0 {
				c.inPidle = true
				l.pidle.pushBack(c)
			} else {
				l.idle.pushBack(c)
			}
			if c.cl != nil {
				c.cl.idle.pushBack(c)
			}
			l.armSweeper(now)
		}
		l.mu.Unlock()
	case http.StateActive:
		l.mu.Lock()
		if !c.released {
			l.unsilence(c)
			l.unidle(c)
		}
		l.mu.Unlock()
	case http.StateHijacked: // a WebSocket: a push connection until it closes
		c.EndDeferredRead() // its reads are its new owner's now
		c.answering.Store(true)
		l.mu.Lock()
		if !c.released {
			l.unsilence(c)
			l.unidle(c)
			l.markPush(c, l.cfg.Now())
		}
		l.mu.Unlock()
	}
}

// MarkPush marks the connection of ctx's request (see ConnContext) as a push connection until
// the returned function is called or it closes: an SSE stream (a WebSocket is marked when
// http.Server hijacks it). Its client's idle connections then go first (see "Push first").
// Without a connection of a Limiter in ctx it does nothing.
func MarkPush(ctx context.Context) (unmark func()) {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if !ok {
		return func() {}
	}
	l := c.lim
	l.mu.Lock()
	if !c.released {
		l.markPush(c, l.cfg.Now())
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.unmarkPush(c)
		l.mu.Unlock()
	}
}

// markPush counts c as a push connection of its client; the client's idle connections move to
// the pushing ones when it starts pushing. Called with l.mu held.
func (l *Limiter) markPush(c *Conn, now time.Time) {
	if c.pushing {
		return
	}
	c.pushing = true
	cl := c.cl
	if cl == nil {
		return
	}
	if cl.pushing++; cl.pushing > 1 {
		return
	}
	for v := cl.idle.head; v != nil; v = v.link[linkOwn].next {
		if !v.inPidle {
			l.idle.remove(v)
			v.inPidle = true
			l.pidle.insertByIdle(v)
		}
	}
	l.armSweeper(now) // the next expiry may be sooner now
}

// unmarkPush undoes markPush (idle connections already among the pushing ones stay there until
// they are used again). Called with l.mu held.
func (l *Limiter) unmarkPush(c *Conn) {
	if !c.pushing {
		return
	}
	c.pushing = false
	if c.cl != nil {
		c.cl.pushing--
	}
}

// sweepBatch bounds the busy idle connections one accept closes (the next accepts close the
// rest): an accept stays cheap.
const sweepBatch = 32

// admit counts nc in, or refuses it (closing it); nil when refused.
func (l *Limiter) admit(ln *Listener, nc net.Conn) *Conn {
	peer := peerAddr(nc)
	exempt := l.cfg.Trusted != nil && peer.IsValid() && l.cfg.Trusted(peer)
	var key string
	if !exempt {
		key = clientaddr.KeyOf(peer) // "" for an unreadable peer: one client, capped as one
	}
	now := l.cfg.Now()
	var shed []shedConn
	l.mu.Lock()
	var cl *client
	if !exempt {
		cl = l.clients[key]
		if cl != nil && cl.n >= l.cfg.MaxConnsPerClient {
			v := cl.idle.head
			if v == nil {
				l.mu.Unlock()
				ln.refuse(nc, ReasonClient)
				return nil
			}
			l.drop(v)
			shed = append(shed, shedConn{v, ReasonClient})
		}
	}
	shed = l.expired(now, sweepBatch, shed)
	// At the ordinary cap, the newcomer gets an ordinary place if idle connections (the
	// longest idle first) or connections silent for SilentGrace make one: as many as it takes,
	// since the reserve's places above the cap may all be held by silent ones (at most
	// Reserve+1 closed). Shedding one alone left such a newcomer on the reserve, where a join
	// is answered 503: 150 silent sockets from 150 addresses kept every join out.
	//
	// Only a newcomer whose client holds no silent connection of its own may close silent
	// ones: an attacker with more silent sockets than places (10 addresses of 20 against a
	// cap of 150) otherwise closed its own older ones with each of its reconnects, so that
	// every place stayed younger than SilentGrace and no one else could ever make room.
	mayShedSilent := exempt || cl == nil || cl.silent == 0
	for l.total >= l.ordinary {
		if v := l.oldestIdle(); v != nil {
			l.drop(v)
			shed = append(shed, shedConn{v, ReasonTotal})
		} else if v := l.oldSilent(now); v != nil && mayShedSilent {
			l.drop(v)
			shed = append(shed, shedConn{v, ReasonSilent})
		} else if v := l.crowdingSilent(); v != nil && mayShedSilent {
			l.drop(v)
			shed = append(shed, shedConn{v, ReasonSilent})
		} else {
			break
		}
	}
	if !exempt {
		cl = l.clients[key] // again: the drops above may have emptied and removed it
	}
	reserve := l.total >= l.ordinary
	if reserve && (l.total >= l.cfg.MaxConns || (cl != nil && cl.reserve >= l.clientReserve)) {
		l.mu.Unlock()
		l.closeShed(shed)
		ln.refuse(nc, ReasonTotal)
		return nil
	}
	if !exempt && cl == nil {
		cl = &client{idle: idleList{k: linkOwn}, silentOwn: idleList{k: linkOwnSilent}}
		l.clients[key] = cl
	}
	c := &Conn{Conn: nc, lim: l, ln: ln, cl: cl, key: key, reserve: reserve, acceptedAt: now, bgWake: make(chan error, 1)}
	l.silent.pushBack(c)
	l.total++
	ln.open++
	if cl != nil {
		cl.n++
		cl.silent++
		cl.silentOwn.pushBack(c)
		if cl.silent > SilentCrowd {
			l.crowding[cl] = struct{}{}
		}
		if reserve {
			cl.reserve++
		}
	}
	l.armSweeper(now)
	l.mu.Unlock()
	l.closeShed(shed)
	if reserve {
		c.readBy = time.Now().Add(l.cfg.ReserveTimeout) // a socket deadline: the system's clock, not Config.Now
		_ = nc.SetReadDeadline(c.readBy)
	}
	return c
}

// unsilence takes c out of the silent connections (it sent a request, or it ends). Called
// with l.mu held.
func (l *Limiter) unsilence(c *Conn) {
	if !c.link[l.silent.k].in {
		return
	}
	l.silent.remove(c)
	if cl := c.cl; cl != nil {
		cl.silent--
		cl.silentOwn.remove(c)
		if cl.silent <= SilentCrowd {
			delete(l.crowding, cl)
		}
	}
}

// crowdingSilent returns the oldest silent connection of a client that holds more than
// SilentCrowd of them, however young, nil when no client does. Called with l.mu held.
func (l *Limiter) crowdingSilent() *Conn {
	for cl := range l.crowding {
		return cl.silentOwn.head
	}
	return nil
}

// oldestIdle is the idle connection to shed first: the longest idle of a pushing client, else
// the longest idle of all (nil when none is idle). Called with l.mu held.
func (l *Limiter) oldestIdle() *Conn {
	if l.pidle.head != nil {
		return l.pidle.head
	}
	return l.idle.head
}

// oldSilent returns the oldest connection that has not sent a request SilentGrace after its
// accept, nil when there is none. Called with l.mu held.
func (l *Limiter) oldSilent(now time.Time) *Conn {
	if v := l.silent.head; v != nil && now.Sub(v.acceptedAt) >= SilentGrace {
		return v
	}
	return nil
}

// expired drops, while the instance is busy, up to n connections idle for BusyIdleTimeout
// at now, and returns them appended to shed. Called with l.mu held.
func (l *Limiter) expired(now time.Time, n int, shed []shedConn) []shedConn {
	if l.total < l.cfg.BusyAt {
		return shed
	}
	for _, e := range [...]struct {
		list    *idleList
		timeout time.Duration
		reason  Reason
	}{{&l.pidle, l.cfg.PushIdleTimeout, ReasonPush}, {&l.idle, l.cfg.BusyIdleTimeout, ReasonBusy}} {
		cutoff := now.Add(-e.timeout)
		for n > 0 {
			v := e.list.head
			if v == nil || v.idleSince.After(cutoff) {
				break
			}
			l.drop(v)
			shed = append(shed, shedConn{v, e.reason})
			n--
		}
	}
	return shed
}

// armSweeper arms the sweeper while the instance is busy with idle connections, or arms it
// again sooner: it fires when the first idle connection expires (the longest idle one of a
// pushing client after PushIdleTimeout, or of the others after BusyIdleTimeout; by
// Config.Now, a test clock that jumps is caught up with at the next accept). Called with l.mu
// held.
func (l *Limiter) armSweeper(now time.Time) {
	if l.total < l.cfg.BusyAt || (l.idle.head == nil && l.pidle.head == nil) {
		return
	}
	var at time.Time
	if v := l.idle.head; v != nil {
		at = v.idleSince.Add(l.cfg.BusyIdleTimeout)
	}
	if v := l.pidle.head; v != nil {
		if p := v.idleSince.Add(l.cfg.PushIdleTimeout); at.IsZero() || p.Before(at) {
			at = p
		}
	}
	if l.sweeper != nil {
		if !at.Before(l.sweepAt) {
			return // armed for this one already, or sooner
		}
		// A pushing client's connection went idle, or a client started pushing: its idle
		// connections expire before the one the sweeper waits for.
		l.sweeper.Stop()
		l.sweeps++
	}
	gen := l.sweeps
	l.sweepAt = at
	l.sweeper = time.AfterFunc(at.Sub(now), func() { l.sweep(gen) })
}

// disarmSweeper stops the sweeper when it has nothing left to do: the instance is no longer
// busy, or nothing is idle. Called with l.mu held.
func (l *Limiter) disarmSweeper() {
	if l.sweeper != nil && (l.total < l.cfg.BusyAt || (l.idle.head == nil && l.pidle.head == nil)) {
		l.sweeper.Stop()
		l.sweeper = nil
		l.sweeps++ // one that fired already and waits for l.mu does nothing
	}
}

// sweep is the sweeper of generation gen: it closes the connections idle for BusyIdleTimeout
// while busy and arms itself again for the next.
func (l *Limiter) sweep(gen int) {
	now := l.cfg.Now()
	l.mu.Lock()
	if gen != l.sweeps {
		l.mu.Unlock()
		return
	}
	l.sweeper = nil
	l.sweeps++
	shed := l.expired(now, l.total, nil)
	l.armSweeper(now)
	l.mu.Unlock()
	l.closeShed(shed)
}

// shedConn is an idle connection dropped from the counts, to be closed.
type shedConn struct {
	c      *Conn
	reason Reason
}

// closeShed reports the connections dropped and closes them (outside l.mu).
func (l *Limiter) closeShed(shed []shedConn) {
	for _, s := range shed {
		if l.cfg.OnShed != nil {
			l.cfg.OnShed(s.c.ln.name, s.reason)
		}
		_ = s.c.closeNet()
	}
}

// shedIdle closes up to n of the longest idle connections (accept failed for want of files).
func (l *Limiter) shedIdle(n int, reason Reason) {
	var shed []shedConn
	l.mu.Lock()
	for range n {
		v := l.oldestIdle()
		if v == nil {
			break
		}
		l.drop(v)
		shed = append(shed, shedConn{v, reason})
	}
	l.mu.Unlock()
	l.closeShed(shed)
}

// drop takes c out of the counts (once). Called with l.mu held.
func (l *Limiter) drop(c *Conn) {
	if c.released {
		return
	}
	c.released = true
	l.unsilence(c)
	l.unidle(c)
	l.unmarkPush(c)
	l.total--
	c.ln.open--
	if cl := c.cl; cl != nil {
		cl.n--
		if c.reserve {
			cl.reserve--
		}
		if cl.n == 0 {
			delete(l.clients, c.key)
		}
	}
	l.disarmSweeper()
}

// unidle takes c off the idle lists. Called with l.mu held.
func (l *Limiter) unidle(c *Conn) {
	if c.inPidle {
		l.pidle.remove(c)
		c.inPidle = false
	} else {
		l.idle.remove(c)
	}
	if c.cl != nil {
		c.cl.idle.remove(c)
	}
	l.disarmSweeper()
}

// release drops c from the counts when it closes.
func (l *Limiter) release(c *Conn) {
	l.mu.Lock()
	l.drop(c)
	l.mu.Unlock()
}

// peerAddr is the address of nc's peer, the zero Addr when it has none.
func peerAddr(nc net.Conn) netip.Addr {
	switch a := nc.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		return ap.Addr().Unmap()
	}
}

// filesBatch is how many idle connections an accept that failed for want of files closes.
const filesBatch = 16

// Listener is a net.Listener limited by a Limiter.
type Listener struct {
	net.Listener
	lim  *Limiter
	name string
	open int // guarded by lim.mu
}

// Accept returns the next connection admitted; those refused are closed on the way. When the
// listener's accept fails for want of files (EMFILE, ENFILE), the longest idle connections
// are closed and the error is returned (http.Server tries again shortly).
func (ln *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := ln.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				ln.lim.shedIdle(filesBatch, ReasonFiles)
			}
			return nil, err
		}
		if c := ln.lim.admit(ln, nc); c != nil {
			return c, nil
		}
	}
}

// Open returns the number of connections open on this listener.
func (ln *Listener) Open() int {
	ln.lim.mu.Lock()
	defer ln.lim.mu.Unlock()
	return ln.open
}

// refuse reports a connection refused and closes it.
func (ln *Listener) refuse(nc net.Conn, r Reason) {
	if ln.lim.cfg.OnRefuse != nil {
		ln.lim.cfg.OnRefuse(ln.name, r)
	}
	_ = nc.Close()
}

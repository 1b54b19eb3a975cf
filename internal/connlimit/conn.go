package connlimit

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Conn is a connection accepted by a Listener. Closing it gives its place back.
type Conn struct {
	net.Conn
	lim     *Limiter
	ln      *Listener
	cl      *client // nil for a trusted proxy
	key     string
	reserve bool
	readBy  time.Time // a reserve connection reads until then

	// Guarded by lim.mu.
	released   bool      // out of the counts (closed, or shed)
	pushing    bool      // a push connection (hijacked, or MarkPush)
	inPidle    bool      // idle among the pushing clients' (Limiter.pidle), not Limiter.idle
	idleSince  time.Time // when it last became idle
	acceptedAt time.Time // when it was accepted (Config.Now)
	link       [4]links  // on the lists: linkAll (every idle connection), linkOwn (its client's), linkSilent, linkOwnSilent

	closeOnce sync.Once
	closeErr  error

	// The background read of the request being served (DeferBackgroundRead): bgOff, bgArmed or
	// bgWaiting; bgWake ends a waiting one with what its Read returns (made with the Conn).
	bg     atomic.Int32
	bgWake chan error

	// A read deadline set by SetBodyDeadline and not yet given to the socket (Unix ns; 0 none).
	bodyBy atomic.Int64

	// A handler answers the request being served (Serving), or the connection was handed
	// over (StateHijacked): its Writes are not http.Server's own (Config.ServerAnswer).
	answering atomic.Bool
}

const (
	bgOff     = iota
	bgArmed   // the request's handler does not need the background read: defer it
	bgWaiting // a background read waits on bgWake
)

// errReadNow ends a deferred background read by making it after all (UndeferBackgroundRead).
var errReadNow = errors.New("connlimit: read now")

// Reserve reports whether the connection was accepted into the reserve.
func (c *Conn) Reserve() bool { return c.reserve }

// Close closes the connection and gives its place back.
func (c *Conn) Close() error {
	c.lim.release(c)
	return c.closeNet()
}

// closeNet closes the network connection once.
func (c *Conn) closeNet() error {
	c.closeOnce.Do(func() { c.closeErr = c.Conn.Close() })
	if c.bg.Load() == bgWaiting && c.bg.CompareAndSwap(bgWaiting, bgOff) {
		c.bgWake <- net.ErrClosed
	}
	return c.closeErr
}

// Read reads from the connection; a deferred background read (DeferBackgroundRead) waits
// instead until it is aborted.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 1 && c.bg.Load() == bgArmed && c.bg.CompareAndSwap(bgArmed, bgWaiting) {
		if err := <-c.bgWake; err != errReadNow {
			return 0, err
		}
	}
	if d := c.bodyBy.Load(); d != 0 && c.bodyBy.CompareAndSwap(d, 0) {
		if err := c.Conn.SetReadDeadline(c.clamp(time.Unix(0, d))); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// SetBodyDeadline gives the reads of the request of ctx's body (on a connection of a
// Limiter's, see ConnContext) the deadline t, as http.ResponseController's SetReadDeadline
// does, but only once a read reaches the socket: a small body that came with its request's
// header is read from http.Server's buffer and costs no deadline (two changes of the
// runtime's timers, set and then cleared as the next request is read). A deadline the server
// sets itself (the next request's) replaces it, as it would replace one set at once. It
// reports false, doing nothing, when ctx has no such connection.
func SetBodyDeadline(ctx context.Context, t time.Time) bool {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if !ok {
		return false
	}
	c.bodyBy.Store(t.UnixNano())
	return true
}

// RawSocket returns the socket of the accepted connection, for a hijacked connection's writer
// (a WebSocket's, package wsframe) to write to directly: c passes bytes through unchanged
// (Config.ServerAnswer only rewrites net/http's own error answers, which a hijacked
// connection never carries). Not SyscallConn: the standard library would then send files to
// the socket past c. Errors: the accepted connection has no socket.
func (c *Conn) RawSocket() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("connlimit: the connection has no socket")
	}
	return sc.SyscallConn()
}

// Write writes p to the connection, or what Config.ServerAnswer makes of it: only a Write
// made while no handler answers (see Serving) that starts as an answer with a 4xx or 5xx
// status is shown to it, which costs every other Write a few comparisons.
func (c *Conn) Write(p []byte) (int, error) {
	if f := c.lim.cfg.ServerAnswer; f != nil && len(p) > 12 && p[0] == 'H' && (p[9] == '4' || p[9] == '5') && !c.answering.Load() {
		if q, ok := f(c.ln.name, p); ok {
			if _, err := c.Conn.Write(q); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

// SetReadDeadline sets the read deadline; on a connection of the reserve, never later than
// its end (Config.ReserveTimeout after the accept). A deadline already past ends a deferred
// background read with os.ErrDeadlineExceeded, as it ends a read in the kernel.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.bodyBy.Store(0)
	err := c.Conn.SetReadDeadline(c.clamp(t))
	if c.bg.Load() == bgWaiting && !t.IsZero() && !t.After(time.Now()) && c.bg.CompareAndSwap(bgWaiting, bgOff) {
		c.bgWake <- os.ErrDeadlineExceeded
	}
	return err
}

// DeferBackgroundRead defers the background read http.Server makes during a handler of the
// request of ctx (on a connection of a Limiter's, see ConnContext; nil otherwise), which
// watches for the client going away and for a pipelined request: a handler whose context
// does not end with its client (the API's, whose requests carry a deadline of their own) has
// no use for it, and the read costs a system call and a wake-up of the network poller a
// request (an EAGAIN read while the handler waits on Redis; docs/scaling.md). The read waits
// instead, without a system call, until the server aborts it as the handler returns (a read
// deadline in the past) or the connection closes; a pipelined request is then read by the
// server's next read, as always. Call EndDeferredRead when the handler returns, and
// UndeferBackgroundRead if it turns out to need the read after all (a stream).
//
// It knows the background read by its size: http.Server's (net/http server.go, connReader.
// backgroundRead) is the only 1-byte read on a served connection; its other reads fill a
// bufio.Reader (4 KiB), and TLS reads whole records.
func DeferBackgroundRead(ctx context.Context) *Conn {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if !ok {
		return nil
	}
	c.bg.CompareAndSwap(bgOff, bgArmed)
	return c
}

// UndeferBackgroundRead lets the background read deferred by DeferBackgroundRead be made now.
func (c *Conn) UndeferBackgroundRead() {
	if !c.bg.CompareAndSwap(bgArmed, bgOff) && c.bg.CompareAndSwap(bgWaiting, bgOff) {
		c.bgWake <- errReadNow
	}
}

// EndDeferredRead ends what DeferBackgroundRead armed when no background read took it (a
// background read waiting is ended by the server's abort).
func (c *Conn) EndDeferredRead() { c.bg.CompareAndSwap(bgArmed, bgOff) }

// SetDeadline sets both deadlines, the read one as SetReadDeadline does.
func (c *Conn) SetDeadline(t time.Time) error {
	c.bodyBy.Store(0)
	if !c.reserve {
		return c.Conn.SetDeadline(t)
	}
	return errors.Join(c.Conn.SetReadDeadline(c.clamp(t)), c.Conn.SetWriteDeadline(t))
}

func (c *Conn) clamp(t time.Time) time.Time {
	if c.reserve && (t.IsZero() || t.After(c.readBy)) {
		return c.readBy
	}
	return t
}

// CloseWrite half-closes a TCP connection (http.Server does before closing a connection
// whose request body it did not read, so that the client reads the answer).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom lets http.Server send files with sendfile/splice as on a bare *net.TCPConn.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

type connKey struct{}

// ConnContext is http.Server.ConnContext for the servers of a Limiter's listeners: the
// requests of a connection carry it, so that Serving and MarkPush find it.
func ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := nc.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// Serving is for the first handler of a request (see ConnContext): it marks the request's
// connection as answering it, so that its Writes are the handler's until the connection goes
// idle again (for good once hijacked) and Config.ServerAnswer sees none of them (a body that
// happens to begin like http.Server's own answer is sent as it is), and reports whether the
// request came over a connection of the reserve.
func Serving(ctx context.Context) (reserve bool) {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if !ok {
		return false
	}
	c.answering.Store(true)
	return c.reserve
}

// The idle lists: intrusive doubly linked lists (no allocation as a connection goes idle and
// busy again, twice per keep-alive request), the longest idle at the head.
const (
	linkAll = iota
	linkOwn
	linkSilent    // connections that have not sent their first request yet, the oldest at the head
	linkOwnSilent // the same, of one client (client.silentOwn)
)

type links struct {
	prev, next *Conn
	in         bool
}

type idleList struct {
	head, tail *Conn
	k          int // which of Conn.link
	n          int
}

func (l *idleList) pushBack(c *Conn) {
	lk := &c.link[l.k]
	lk.prev, lk.next, lk.in = l.tail, nil, true
	if l.tail != nil {
		l.tail.link[l.k].next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

// insertByIdle inserts c in order of idleSince (from the back: it is usually among the newest).
func (l *idleList) insertByIdle(c *Conn) {
	at := l.tail
	for at != nil && at.idleSince.After(c.idleSince) {
		at = at.link[l.k].prev
	}
	if at == nil { // to the front
		lk := &c.link[l.k]
		lk.prev, lk.next, lk.in = nil, l.head, true
		if l.head != nil {
			l.head.link[l.k].prev = c
		} else {
			l.tail = c
		}
		l.head = c
		l.n++
		return
	}
	lk := &c.link[l.k]
	lk.prev, lk.next, lk.in = at, at.link[l.k].next, true
	if lk.next != nil {
		lk.next.link[l.k].prev = c
	} else {
		l.tail = c
	}
	at.link[l.k].next = c
	l.n++
}

func (l *idleList) remove(c *Conn) {
	lk := &c.link[l.k]
	if !lk.in {
		return
	}
	if lk.prev != nil {
		lk.prev.link[l.k].next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		lk.next.link[l.k].prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	*lk = links{}
	l.n--
}

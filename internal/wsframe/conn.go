package wsframe

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobwas/ws"
)

// Handler is what a Conn calls back into. Its methods are called from the connection's reader
// (Schedule also from Ping) and must not block for long.
type Handler interface {
	// Schedule asks for a writer: a control frame waits (AppendControl). Calls may come while
	// a writer holds the connection; the caller decides how to merge them.
	Schedule()
	// Text receives one complete text message of the client: valid UTF-8, at most
	// Options.MaxMessage bytes, fragments joined. msg is reused once Text returns.
	Text(msg []byte)
}

// Options shape a connection. Zero fields take the defaults named on them.
type Options struct {
	// MaxMessage is the largest data message a client may send, in bytes (its fragments
	// together); a larger one closes the connection with 1009. It is also the size of the
	// reader's message buffer. Defaults to 256.
	MaxMessage int
	// CloseWait bounds how long the reader waits for a close frame it asked for (after a
	// client's close frame or protocol error) to be written, before it closes the connection
	// anyway: the caller's write timeout. Defaults to 10 s.
	CloseWait time.Duration
	// CloseTimeout is how long a client has to answer the server's close frame, and how long
	// the reader keeps reading after a protocol error, before the connection is closed.
	// Defaults to 5 s.
	CloseTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultMaxMessage   = 256
	DefaultCloseWait    = 10 * time.Second
	DefaultCloseTimeout = 5 * time.Second
)

func (o Options) withDefaults() Options {
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.CloseWait <= 0 {
		o.CloseWait = DefaultCloseWait
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	return o
}

// Conn is the server side of one upgraded WebSocket connection: the raw connection, the
// control frames waiting for a writer, and whether the server's close frame went out. Its
// reader (ReadLoop) runs on a goroutine of its own; the caller's writers take it one at a time
// (see Handler.Schedule). Methods are safe for concurrent use, except that AppendControl,
// Write and WriteRest are for the one writer holding the connection.
type Conn struct {
	nc   net.Conn
	rc   syscall.RawConn // nc's socket, when its bytes go there as they are: a write that fits goes without a deadline
	rd   io.Reader       // nc, after what the handshake's reader buffered
	h    Handler
	opts Options

	// mu guards the control frames waiting for a writer; it is never held across I/O. (The
	// small fields sit together: a Conn is kept per connection.)
	mu          sync.Mutex
	pongBuf     [ws.MaxControlFramePayloadSize]byte // the latest ping's payload (RFC 6455 5.5.3 allows answering only the latest)
	pongLen     uint8
	pongDue     bool
	pingDue     bool
	closeDue    bool
	closeCode   StatusCode
	closeReason string

	closed   atomic.Bool                   // the close frame is written, or writing failed: nothing more goes out
	closedc  chan struct{}                 // closed with closed
	pongWait atomic.Pointer[chan struct{}] // closed by the reader at the next pong
	pingSent atomic.Int64                  // unix ns when the last ping was handed to a writer (AppendControl)
	heard    atomic.Int64                  // unix ns when the reader last read a frame
}

func newConn(nc net.Conn, rd io.Reader, h Handler, o Options) *Conn {
	c := &Conn{nc: nc, rd: rd, h: h, opts: o, closedc: make(chan struct{})}
	// Only a connection whose bytes go to its socket as they are: a TCP connection, or a
	// wrapper that says so (RawSocket: package connlimit's). Never one unwrapped further, since
	// a wrapper such as tls.Conn changes the bytes on their way.
	switch v := nc.(type) {
	case interface {
		RawSocket() (syscall.RawConn, error)
	}:
		c.rc, _ = v.RawSocket()
	case syscall.Conn:
		c.rc, _ = v.SyscallConn()
	}
	return c
}

// NetConn returns the raw connection (for socket options; reads and writes go through c).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Closed reports whether nothing more is written to c: its close frame went out, or a write
// failed, or Abort was called.
func (c *Conn) Closed() bool { return c.closed.Load() }

func (c *Conn) markClosed() {
	if c.closed.CompareAndSwap(false, true) {
		close(c.closedc)
	}
}

// Abort ends c without a close frame: nothing more is written, the connection is closed (its
// reader then returns).
func (c *Conn) Abort() {
	c.markClosed()
	_ = c.nc.Close()
}

// Ping queues a ping for a writer (calling Schedule) and returns a channel closed when the
// client's next pong arrives. A later Ping replaces the channel: the earlier one is then
// never closed.
func (c *Conn) Ping() <-chan struct{} {
	ch := make(chan struct{})
	c.pongWait.Store(&ch)
	c.mu.Lock()
	c.pingDue = true
	c.mu.Unlock()
	c.h.Schedule()
	return ch
}

// PingSent is when the last ping went to a writer (AppendControl; the zero Time before any):
// the time from which a pong is owed. A ping queued behind a backlog of the server's own
// writes is not yet owed one.
func (c *Conn) PingSent() time.Time { return unixNano(c.pingSent.Load()) }

// Heard is when the reader last read a frame of the client, of any kind (the zero Time before
// any): a client that sent anything after a ping is alive, whether or not its pong came yet.
func (c *Conn) Heard() time.Time { return unixNano(c.heard.Load()) }

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// queuePong has a writer answer a ping with payload (the latest ping's payload wins).
func (c *Conn) queuePong(payload []byte) {
	c.mu.Lock()
	c.pongLen = uint8(copy(c.pongBuf[:], payload)) // at most 125 bytes
	c.pongDue = true
	c.mu.Unlock()
	c.h.Schedule()
}

// pongArrived wakes the Ping waiting for a pong, if any.
func (c *Conn) pongArrived() {
	if ch := c.pongWait.Swap(nil); ch != nil {
		close(*ch)
	}
}

// closeAndWait has a writer send a close frame with code and reason, ahead of anything else
// the writer would send, unless one was asked for already; it returns when the frame is
// written or the connection failed, or after CloseWait.
func (c *Conn) closeAndWait(code StatusCode, reason string) {
	c.mu.Lock()
	if !c.closeDue {
		c.closeDue, c.closeCode, c.closeReason = true, code, reason
	}
	c.mu.Unlock()
	c.h.Schedule()
	t := time.NewTimer(c.opts.CloseWait)
	defer t.Stop()
	select {
	case <-c.closedc:
	case <-t.C:
	}
}

// ControlDue reports whether a control frame waits for a writer.
func (c *Conn) ControlDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pongDue || c.pingDue || c.closeDue
}

// AppendControl appends the control frames waiting for a writer to b — the latest ping's pong,
// a ping, the close frame the reader asked for — and returns the extended slice; closing
// reports that it ends with a close frame, after which nothing may be appended. The pong and
// the ping are appended once; the close frame until it is written.
func (c *Conn) AppendControl(b []byte) (_ []byte, closing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pongDue {
		b = appendFrame(b, ws.OpPong, c.pongBuf[:c.pongLen])
		c.pongDue = false
	}
	if c.pingDue {
		b = appendFrame(b, ws.OpPing, nil)
		c.pingDue = false
		c.pingSent.Store(time.Now().UnixNano())
	}
	if c.closeDue {
		b = AppendClose(b, c.closeCode, c.closeReason)
	}
	return b, c.closeDue
}

// Write writes b, frames built by AppendControl, AppendText and AppendClose, with a write
// deadline timeout from now, and returns the bytes written. closing says that b ends with a
// close frame: the client then has CloseTimeout from now to answer before the reader closes
// the connection, and once b is written nothing more goes out (Closed). A write cut short by
// its deadline returns an error matching os.ErrDeadlineExceeded; finish it with WriteRest. Any
// other error means the connection is gone: call Abort.
func (c *Conn) Write(b []byte, closing bool, timeout time.Duration) (int, error) {
	if closing {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.opts.CloseTimeout))
	}
	return c.write(b, closing, timeout)
}

// WriteRest writes rest, what a Write cut short by its deadline left, with a write deadline
// timeout from now; closing as passed to that Write. An error means the connection is gone or
// too slow: call Abort.
func (c *Conn) WriteRest(rest []byte, closing bool, timeout time.Duration) error {
	_, err := c.write(rest, closing, timeout)
	return err
}

func (c *Conn) write(b []byte, closing bool, timeout time.Duration) (int, error) {
	if c.rc != nil {
		// Once, without a deadline: a socket with room takes the message at once, and arming a
		// deadline (a timer set, and fired later) cost more than the write. A full socket, or a
		// part written, goes on below with the deadline.
		var n int
		var werr error
		if err := c.rc.Write(func(fd uintptr) bool {
			n, werr = syscall.Write(int(fd), b)
			return true
		}); err != nil {
			// A deadline of before (the handshake's) that passed: the timed write sets its own.
			return c.writeTimed(b, closing, timeout)
		}
		switch {
		case werr == nil && n == len(b):
			if closing {
				c.markClosed()
			}
			return n, nil
		case werr != nil && werr != syscall.EAGAIN && werr != syscall.EINTR:
			return 0, werr
		}
		k, err := c.writeTimed(b[max(n, 0):], closing, timeout)
		return max(n, 0) + k, err
	}
	return c.writeTimed(b, closing, timeout)
}

func (c *Conn) writeTimed(b []byte, closing bool, timeout time.Duration) (int, error) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	k, err := c.nc.Write(b)
	if c.rc != nil && err == nil {
		_ = c.nc.SetWriteDeadline(time.Time{}) // the next write tries without one first
	}
	if err == nil && closing {
		c.markClosed()
	}
	return k, err
}

package push

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/wsframe"
)

// connState is where a connection's ticket stands, as far as its client has been told. It only
// moves forward: new -> waiting -> admitted -> terminal (any step may be skipped).
type connState uint8

const (
	stateNew      connState = iota // registered, first message not yet queued
	stateWaiting                   // told it is in line
	stateAdmitted                  // told it is admitted
	stateTerminal                  // told a final status; the connection closes after it
)

// closeReason is why the hub ended a connection.
type closeReason uint8

const (
	reasonNone     closeReason = iota
	reasonSlow                 // its send queue was full
	reasonWrite                // a write failed or timed out
	reasonPing                 // a ping went unanswered
	reasonShutdown             // the hub is stopping: the client should reconnect
)

// outMsg is one queued message.
type outMsg struct {
	data    []byte
	last    bool // the final status: close the connection once it is written
	comment bool // an SSE heartbeat: a "ping" event (data is unused)
	// droppable: a position, stats or keep-alive that a later one supersedes. It is not
	// queued when the queue is half full, so a client behind on them keeps its connection
	// and its room for the messages that matter (admitted, final statuses).
	droppable bool
}

// conn is one push connection (WebSocket or SSE) of one ticket. The fields below the mutex
// line are guarded by the room's mutex; the hub never blocks on a connection: it queues
// messages without waiting and drops the connection when its queue is full.
type conn struct {
	hub      *Hub
	room     *room // set once at registration
	ref      queue.TicketRef
	ticketID string
	sse      bool
	client   string // the client key counted by takeClient ("" = none)
	out      chan outMsg
	done     chan struct{} // closed by kill
	killed   atomic.Bool   // set by kill before done is closed: dead without a channel receive
	killOnce sync.Once
	reason   closeReason // written before done is closed

	wsc       atomic.Pointer[wsframe.Conn] // set once the WebSocket handshake completed; nil for SSE
	scheduled atomic.Bool                  // queued for or held by a writer (WebSocket only)

	visible atomic.Bool // the page said it is visible (WebSocket only)
	pinging atomic.Bool // a ping (or a renewal) is in flight
	renew   atomic.Bool // renew the admitted session at the next tick (the page became visible)

	// guarded by room.mu
	next          *conn // the next connection of the same ticket number
	state         connState
	pending       bool  // a Status call for this connection is in flight
	checkedClosed bool  // a Status call was made because the event's closing time passed
	checkedVoid   int64 // a Status call was made for the void range starting here (queue.Stats.VoidFrom)
	pos, waiting  int64
	eta           int64
	posAt         time.Time // when the last position message was queued
	pingAt        time.Time // when the last keep-alive was sent
	until         time.Time // admitted_until as last told
	renewedAt     time.Time // the admitted session's last renewal (or the admission)
}

// kill ends the connection for reason: a writer closes a WebSocket (with the close code of
// the reason), the handler an SSE stream. Safe to call more than once and from any goroutine;
// the first reason wins.
func (c *conn) kill(reason closeReason) {
	c.killOnce.Do(func() {
		c.reason = reason
		c.killed.Store(true)
		close(c.done)
		if !c.sse {
			c.hub.schedule(c)
		}
	})
}

// dead reports whether c was killed. An atomic load, not a receive on done: the tick asks it of
// every connection twice a second (a non-blocking receive was 17% of an idle instance's CPU
// with 15,000 sockets).
func (c *conn) dead() bool { return c.killed.Load() }

// send queues m without blocking. A droppable message is skipped when the queue is half full;
// any other message finding the queue full drops the connection as a slow consumer. It
// reports whether m was queued. Called with the room's mutex held, so that messages of one
// connection are queued in the order of the state changes they report.
func (c *conn) send(m outMsg) bool {
	if c.dead() {
		return false
	}
	if m.droppable && len(c.out) >= cap(c.out)/2 {
		c.hub.skipped.Add(1)
		return false
	}
	select {
	case c.out <- m:
		if !c.sse {
			c.hub.schedule(c)
		}
		return true
	default:
		c.hub.droppedSlow.Add(1)
		c.hub.log.Debug("push: dropping a slow consumer", "event", c.ref.Event, "number", c.ref.Number)
		c.kill(reasonSlow)
		return false
	}
}

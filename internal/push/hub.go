// Package push tells the people in line, live, where they stand: a WebSocket or Server-Sent
// Events connection per ticket receives its position as the line moves, and "admitted" (with
// the admission token) the moment the serving counter passes its number, whichever instance's
// admission processor moved it.
//
// # Delivery across instances
//
// An admission step moves the serving counter of one event over a range of ticket numbers
// (queue.AdmitResult From..To). The instance that ran the step publishes one small message for
// the whole batch on the event's channel (Redis Pub/Sub, sharded Pub/Sub on a Redis Cluster):
//
//	a <origin> <from> <to> <ts_ms>      an admission batch
//	h <origin> <ts_ms>                  a hint: re-read the event now (sold out, closed)
//	e <origin> <gen> <ts_ms> <n>...     tickets of line generation gen that left the line
//	                                    (DELETE) or completed their session through the
//	                                    origin, gathered for endedDelay
//
// so the messages per batch do not grow with the batch size, and an instance subscribes only
// to the events it holds connections for. Each instance keeps its connections indexed by
// ticket number and, for a batch, asks the store for the status of each of its own tickets in
// the range (Store.Status claims the admission and returns a fresh admitted_until), then sends
// each the result. No instance parses a message per admitted person.
//
// Positions are computed locally: once per Tick the hub reads each event's counters (one
// Stats call per event, not per connection) and estimates every waiting ticket's position
// from them (see estimatePosition), sending a connection its new place at most once per
// PositionInterval (a new line length or ETA alone at most once per StatsInterval). The same tick heals lost messages: a connection still waiting although the
// serving counter passed its number a tick ago is checked with Status, so a Pub/Sub message
// lost to a reconnect costs at most ResyncGrace plus a tick. Pub/Sub is a wake-up hint; the counters
// are the truth; polling the ticket stays the client's fallback.
//
// # Activity
//
// Connecting counts as activity (its first Status call), but an open connection alone does not
// hold an admitted slot: a WebSocket renews its admitted session (a Status call, at most every
// session_ttl/3) only while the page says it is visible ({"type":"visible"} / {"type":"hidden"}
// from the client) and it answers the ping sent just before. A hidden page keeps its place in
// line but not its admission past session_ttl_s. SSE connections, which cannot answer, never
// renew a session (a page on SSE reads its ticket while visible instead). Whatever renews it
// or not, once the session's end as last told passes by the store's clock, the tick reads the
// ticket for each such connection (room.tickConn): the stream hears expired, or learns the end
// that the ticket's own reads moved it to.
//
// # Limits
//
// Each connection has a bounded send queue; the hub never waits for a client and closes one
// whose queue is full or whose write takes longer than WriteTimeout. Connections per instance
// are capped (MaxConns, 503 beyond); a client's connections to an event are capped on all
// instances together (limits.push_per_client, counted in the store: clients.go). A WebSocket costs one goroutine (its reader) and no
// buffers: its messages are written by a small pool of writers shared by all connections
// (wsconn.go); an SSE stream costs its HTTP handler. Pings, store calls and timers are driven
// by the hub's one tick.
package push

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/ratelimit"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// Route patterns served by the hub.
const (
	RouteWebSocket = "GET /v1/events/{event_id}/tickets/{ticket_id}/ws"
	RouteSSE       = "GET /v1/events/{event_id}/tickets/{ticket_id}/events"
)

// minKickGap is the least time between a tick run early (a kick) and the tick before it, so
// that kicks cost at most ten extra ticks a second, each reading only the kicked events.
const minKickGap = 100 * time.Millisecond

// storeCallTimeout bounds one store call of a delivery, heal or renewal.
const storeCallTimeout = 5 * time.Second

// Publishing: batch messages wait in a queue of publishQueue for the hub's one publisher,
// which sends up to publishPipeline of them per round trip, each attempt bounded by
// publishTimeout, with one retry. A full queue drops the message (the resync heals it).
const (
	publishQueue    = 4096
	publishPipeline = 64
	publishTimeout  = 5 * time.Second
)

// Hub is the push side of one instance. It is safe for concurrent use.
type Hub struct {
	cfg        Config
	log        *slog.Logger
	keeper     loop.Loop // keepAlives every Tick
	now        func() time.Time
	store      Line
	events     Events
	tickets    *token.TicketIDs
	admissions *token.Admissions
	notifier   store.Notifier
	origin     string // this hub's id in the messages it publishes

	ctx    context.Context // ends at Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup     // every goroutine the hub started or serves a connection on
	sem    chan struct{}      // bounds store calls in flight
	kickc  chan struct{}      // capacity 1: run a tick now
	pubq   chan store.Message // batch messages for the publisher
	wq     chan *conn         // WebSocket connections with something to write (see wsconn.go)
	wstop  chan struct{}      // closed when the writers are to stop
	wwg    sync.WaitGroup     // the writers

	mu    sync.Mutex
	rooms map[string]*room

	started, stopping atomic.Bool
	stopOnce          sync.Once
	conns             atomic.Int64
	tickFrom          atomic.Int64 // when the tick that runs began (h.now, Unix ns); 0 between ticks

	clientMu       sync.Mutex
	clients        map[clientKey]clientCount // open connections per event and client (clients.go)
	clientRefusals *ratelimit.Refusals
	renewAt        time.Time   // the next renewal of the clients' shares (tick only)
	renewing       atomic.Bool // a renewal is running

	endedMu sync.Mutex
	endedq  map[endedKey][]int64 // tickets that ended through this instance, not published yet
	endedc  chan struct{}        // capacity 1: endedq has tickets (the publisher gathers them)

	published, publishErrors, received                         atomic.Int64
	deliveredLocal, deliveredRemote, deliveredResync, renewals atomic.Int64
	droppedSlow, droppedWrite, droppedPing, skipped            atomic.Int64
	stalled, refusedFull                                       atomic.Int64
}

// Counters are a hub's totals since it started.
type Counters struct {
	Conns int64 // push connections open now
	// Published counts channel messages this instance published: one per admission batch it
	// made (whatever the batch size), plus hints and the ended tickets gathered (one per event and
	// endedDelay at most).
	Published     int64
	PublishErrors int64
	// Received counts channel messages received from other instances.
	Received int64
	// DeliveredLocal, DeliveredRemote and DeliveredResync count "admitted" messages sent to
	// connections that were waiting, by how the admission reached this instance: its own
	// batch, another instance's batch through Redis, or the periodic resync.
	DeliveredLocal, DeliveredRemote, DeliveredResync int64
	// Renewals counts admitted sessions renewed for a visible page that answered a ping.
	Renewals int64
	// Dropped counts connections closed by the hub: DroppedSlow whose queue had no room for
	// an admission or final status, DroppedWrite whose write timed out, DroppedPing that did
	// not answer a ping. Dropped is their sum.
	Dropped, DroppedSlow, DroppedWrite, DroppedPing int64
	// Skipped counts position, stats and keep-alive messages not queued because the
	// connection's queue was half full (a later one supersedes them).
	Skipped int64
	// Stalled counts WebSocket writes a client's socket did not take within writeStall
	// (100 ms), finished on a goroutine of their own instead of a shared writer.
	Stalled int64
	// RefusedFull counts connects refused at MaxConns (503 too_many_connections, with a
	// Retry-After of 10-30 s).
	RefusedFull int64
}

// New returns a Hub for cfg's store and events; register its ServeWebSocket and ServeSSE on
// RouteWebSocket and RouteSSE, its OnStep as the admission processor's hook and Collector()
// with the metrics, then Start it. Errors: an invalid Config.
func New(cfg Config) (*Hub, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var id [4]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+)
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		cfg: cfg, log: cfg.Logger, now: cfg.Now,
		store: cfg.Store, events: cfg.Events, tickets: cfg.Tickets, admissions: cfg.Admissions,
		notifier: cfg.Notifier, origin: hex.EncodeToString(id[:]),
		ctx: ctx, cancel: cancel,
		sem:    make(chan struct{}, cfg.StoreConcurrency),
		kickc:  make(chan struct{}, 1),
		pubq:   make(chan store.Message, publishQueue),
		endedc: make(chan struct{}, 1),
		wq:     make(chan *conn, cfg.MaxConns),
		wstop:  make(chan struct{}),
		rooms:  make(map[string]*room),
	}
	h.clients = make(map[clientKey]clientCount)
	h.clientRefusals = ratelimit.NewRefusals(cfg.Now)
	return h, nil
}

// Collector exports the hub's counters as Prometheus metrics (read at scrape time).
func (h *Hub) Collector() prometheus.Collector { return collector{h} }

// Start runs the hub's tick until Stop or ctx ends. Errors: the hub was started or stopped.
func (h *Hub) Start(ctx context.Context) error {
	if h.stopping.Load() {
		return errors.New("push: hub stopped")
	}
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("push: hub already started")
	}
	h.wg.Go(h.publisher)
	for range max(minWriters, writersPerCPU*runtime.GOMAXPROCS(0)) {
		h.wwg.Go(h.writer)
	}
	h.wg.Go(func() {
		t := time.NewTicker(h.cfg.Tick)
		defer t.Stop()
		var last time.Time
		var onlyDue bool
		for {
			select {
			case <-ctx.Done():
				return
			case <-h.ctx.Done():
				return
			case <-t.C:
				onlyDue = false
			case <-h.kickc:
				onlyDue = true
				// A kick runs a tick early, but ticks stay minKickGap apart whoever kicks.
				if wait := minKickGap - time.Since(last); wait > 0 {
					gap := time.NewTimer(wait)
					select {
					case <-gap.C:
					case <-h.ctx.Done():
						gap.Stop()
						return
					}
				}
			}
			last = time.Now()
			_ = loop.Guard("push tick", h.log, func() error { h.tick(onlyDue); return nil })
		}
	})
	h.keeper.Start(ctx, "push keep-alives", h.cfg.Tick, h.log, func(context.Context) error { h.keepAlives(); return nil })
	return nil
}

// keepAlives (h.keeper's step, every Tick) keeps the streams alive while a tick is held up. A
// tick reads the events' counters one after the other, each read bounded by 5 s: a store that
// hangs would hold the keep-alives of every event after the first for seconds each, past a
// page's patience (an SSE page that hears nothing for a few HeartbeatIntervals connects again,
// and every page of the instance would). While a tick has run for longer than one Tick, it
// sends each room's due keep-alives itself (room.keepAlives: no store call; what is due is
// decided under the room's mutex, so the tick and the keeper never send one twice).
func (h *Hub) keepAlives() {
	from := h.tickFrom.Load()
	if from == 0 {
		return
	}
	now := h.now()
	if now.Sub(time.Unix(0, from)) < h.cfg.Tick {
		return
	}
	h.mu.Lock()
	rooms := make([]*room, 0, len(h.rooms))
	for _, r := range h.rooms {
		rooms = append(rooms, r)
	}
	h.mu.Unlock()
	for _, r := range rooms {
		r.keepAlives(now)
	}
}

// Stop tells every client to reconnect (WebSocket close code 1012, SSE "reconnect"), refuses
// new connections (503), ends the subscriptions and waits up to ShutdownGrace for the
// connections and loops to end (or until ctx ends). Safe before Start and more than once. Call
// it before the store is closed. It returns nil.
func (h *Hub) Stop(ctx context.Context) error {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		h.stopping.Store(true) // under mu: no connection registers (and joins wg) after this
		rooms := make([]*room, 0, len(h.rooms))
		for _, r := range h.rooms {
			rooms = append(rooms, r)
		}
		h.mu.Unlock()
		for _, r := range rooms {
			r.mu.Lock()
			for _, c := range r.conns {
				for ; c != nil; c = c.next {
					c.kill(reasonShutdown)
				}
			}
			r.mu.Unlock()
		}
		h.cancel()
		h.keeper.Stop()
		done := make(chan struct{})
		go func() { h.wg.Wait(); close(done) }()
		t := time.NewTimer(h.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			h.log.Warn("push: connections still closing at the end of the shutdown grace", "conns", h.conns.Load())
		case <-ctx.Done():
			h.log.Warn("push: connections still closing when the stop's time ran out", "conns", h.conns.Load())
		}
		close(h.wstop)
		h.wwg.Wait()
	})
	return nil
}

// Counters returns the hub's totals.
func (h *Hub) Counters() Counters {
	return Counters{
		Conns: h.conns.Load(), Published: h.published.Load(), PublishErrors: h.publishErrors.Load(),
		Received: h.received.Load(), DeliveredLocal: h.deliveredLocal.Load(),
		DeliveredRemote: h.deliveredRemote.Load(), DeliveredResync: h.deliveredResync.Load(),
		Renewals: h.renewals.Load(), DroppedSlow: h.droppedSlow.Load(), DroppedWrite: h.droppedWrite.Load(),
		DroppedPing: h.droppedPing.Load(), Skipped: h.skipped.Load(), Stalled: h.stalled.Load(),
		RefusedFull: h.refusedFull.Load(),
		Dropped:     h.droppedSlow.Load() + h.droppedWrite.Load() + h.droppedPing.Load(),
	}
}

// Subscribed reports whether this hub's subscription to event's topic is confirmed by the
// notifier (false for events without local connections).
func (h *Hub) Subscribed(event string) bool {
	r := h.roomOf(event)
	return r != nil && r.subscribed.Load()
}

func (h *Hub) roomOf(event string) *room {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rooms[event]
}

// OnStep is the admission processor's hook (App.OnStep): it queues one message for the batch,
// whatever its size, for the publisher (the processor never waits on Redis for push), and
// delivers to this instance's own connections at once.
func (h *Hub) OnStep(event string, r queue.AdmitResult) {
	if r.Admitted <= 0 || r.To < r.From || h.stopping.Load() {
		return
	}
	{
		msg := make([]byte, 0, 64)
		msg = append(msg, "a "...)
		msg = append(msg, h.origin...)
		msg = append(msg, ' ')
		msg = strconv.AppendInt(msg, r.From, 10)
		msg = append(msg, ' ')
		msg = strconv.AppendInt(msg, r.To, 10)
		msg = append(msg, ' ')
		msg = strconv.AppendInt(msg, r.Now.UnixMilli(), 10)
		select {
		case h.pubq <- store.Message{Topic: store.EventTopic(event), Body: string(msg)}:
		default:
			h.publishErrors.Add(1)
			h.log.Warn("push: publish queue full; dropping a batch message (other instances heal it by their resync)", "event", event)
		}
	}
	if rm := h.roomOf(event); rm != nil {
		rm.addBatch(batch{from: r.From, to: r.To, ts: r.Now, src: srcLocal})
	}
}

// Notify tells every instance to re-read event's state now rather than at its next tick: call
// it after a change that ends waiting tickets (sold out, closed) so their holders hear at
// once. Errors: the publish failed (the instances still see the change at their next ticks).
func (h *Hub) Notify(ctx context.Context, event string) error {
	if rm := h.roomOf(event); rm != nil {
		rm.healSoon()
	}
	msg := "h " + h.origin + " " + strconv.FormatInt(h.now().UnixMilli(), 10)
	if errs := h.notifier.Publish(ctx, store.Message{Topic: store.EventTopic(event), Body: msg}); errs != nil {
		h.publishErrors.Add(1)
		return errs[0]
	}
	h.published.Add(1)
	return nil
}

// Ended tickets (left, or sessions completed) are published gathered: every endedDelay at most
// one message per event and line generation from an instance, of at most endedPerMessage
// tickets, so that a crowd leaving adds a few messages a second, not one per person (the other
// instances look up each number in a map of their own connections).
const (
	endedDelay      = 250 * time.Millisecond
	endedPerMessage = 512
)

// endedKey names the tickets of one event and line generation.
type endedKey struct {
	event string
	gen   uint32
}

// Ended tells the live streams of ref's ticket, which has just left the line or completed its
// admitted session through this instance (line.Config.OnEnd), that it ended: each is read
// again from the store, which answers not_found (or completed), and then closed (its share of
// push_per_client with it). This instance's streams at once; the other instances' within
// endedDelay and a Pub/Sub delivery (a lost message leaves them as before: a waiting ticket's
// last position until the serving counter passes its number).
func (h *Hub) Ended(ref queue.TicketRef) {
	if r := h.roomOf(ref.Event); r != nil {
		h.recheck(r.connsOf(ref.Generation, []int64{ref.Number}))
	}
	if h.stopping.Load() {
		return
	}
	h.endedMu.Lock()
	if h.endedq == nil {
		h.endedq = make(map[endedKey][]int64)
	}
	k := endedKey{ref.Event, ref.Generation}
	h.endedq[k] = append(h.endedq[k], ref.Number)
	h.endedMu.Unlock()
	select {
	case h.endedc <- struct{}{}:
	default:
	}
}

// recheck reads cs's tickets again and tells each connection what it finds, on a goroutine of
// its own: a store call waits for a slot (StoreConcurrency), and neither a request's handler
// (Ended) nor the subscription (onEnded) waits for one.
func (h *Hub) recheck(cs []*conn) {
	if len(cs) == 0 || h.ctx.Err() != nil {
		return
	}
	h.wg.Go(func() {
		for _, c := range cs {
			h.check(c, time.Time{}, srcResync)
		}
	})
}

// endedMessages appends to msgs the messages of the tickets gathered since the last call.
func (h *Hub) endedMessages(msgs []store.Message) []store.Message {
	h.endedMu.Lock()
	q := h.endedq
	h.endedq = nil
	h.endedMu.Unlock()
	ts := h.now().UnixMilli()
	for k, ns := range q {
		for len(ns) > 0 {
			part := ns[:min(len(ns), endedPerMessage)]
			ns = ns[len(part):]
			msg := make([]byte, 0, 48+8*len(part))
			msg = append(msg, "e "...)
			msg = append(msg, h.origin...)
			msg = append(msg, ' ')
			msg = strconv.AppendUint(msg, uint64(k.gen), 10)
			msg = append(msg, ' ')
			msg = strconv.AppendInt(msg, ts, 10)
			for _, n := range part {
				msg = append(msg, ' ')
				msg = strconv.AppendInt(msg, n, 10)
			}
			msgs = append(msgs, store.Message{Topic: store.EventTopic(k.event), Body: string(msg)})
		}
	}
	return msgs
}

// kickRoom runs r's tick soon (within minKickGap), without the other rooms'.
func (h *Hub) kickRoom(r *room) {
	r.due.Store(true)
	h.kick()
}

func (h *Hub) kick() {
	select {
	case h.kickc <- struct{}{}:
	default:
	}
}

// tick runs every room's tick (onlyDue: only those kicked since their last tick) and retires
// rooms left empty for RoomLinger.
func (h *Hub) tick(onlyDue bool) {
	now := h.now()
	h.tickFrom.Store(now.UnixNano())
	defer h.tickFrom.Store(0)
	h.renewClients(now)
	h.mu.Lock()
	rooms := make([]*room, 0, len(h.rooms))
	for id, r := range h.rooms {
		r.mu.Lock()
		idle := r.n == 0 && now.Sub(r.emptySince) >= h.cfg.RoomLinger
		r.mu.Unlock()
		if idle {
			delete(h.rooms, id)
			r.cancel()
			continue
		}
		rooms = append(rooms, r)
	}
	h.mu.Unlock()
	for _, r := range rooms {
		if h.ctx.Err() != nil {
			return
		}
		if due := r.due.Swap(false); due || !onlyDue {
			r.tick(now)
		}
	}
}

// register adds c to its event's room, creating the room (and its subscription) if needed,
// and counts the connection's handler in wg. It returns errStopping when the hub is stopping,
// errTicketFull when c's ticket holds MaxConnsPerTicket connections here already.
func (h *Hub) register(c *conn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping.Load() {
		return errStopping
	}
	r := h.rooms[c.ref.Event]
	if r == nil {
		r = h.newRoom(c.ref.Event)
		h.rooms[c.ref.Event] = r
	}
	if !r.add(c, h.cfg.MaxConnsPerTicket) {
		return errTicketFull
	}
	h.wg.Add(1) // done by unregister
	return nil
}

var (
	errStopping   = errors.New("push: hub stopping")
	errTicketFull = errors.New("push: the ticket's connections are at their cap")
)

// unregister removes c from its room and frees its place under MaxConns.
func (h *Hub) unregister(c *conn) { h.unregisterBy(c, time.Time{}) }

// unregisterBy is unregister with the store asked until deadline (releaseClient's): an opening
// that failed answers by its own deadline, not one more store call's later.
func (h *Hub) unregisterBy(c *conn, deadline time.Time) {
	c.kill(reasonNone)
	c.room.remove(c, h.now())
	h.releaseClient(c.ref.Event, c.client, deadline)
	h.conns.Add(-1)
	h.wg.Done()
}

// acquire takes a store-call slot, or returns false when the hub is stopping.
func (h *Hub) acquire() bool {
	select {
	case h.sem <- struct{}{}:
		return true
	case <-h.ctx.Done():
		return false
	}
}

// check reads c's ticket with Status (claiming a new admission, renewing a live one) and sends
// c the result; ts is the admission batch's time, zero when unknown.
func (h *Hub) check(c *conn, ts time.Time, src source) {
	if !h.acquire() {
		return
	}
	h.wg.Go(func() {
		defer func() { <-h.sem }()
		ctx, cancel := context.WithTimeout(h.ctx, storeCallTimeout)
		t, err := h.store.Status(ctx, c.ref)
		cancel()
		h.apply(c, t, err, ts, src)
	})
}

// renewSession pings c and, if the page answers and still says it is visible, renews its
// admitted session with a Status call.
func (h *Hub) renewSession(c *conn) {
	h.wg.Go(func() {
		defer c.pinging.Store(false)
		if !h.pingNow(c) || !c.visible.Load() || !h.acquire() {
			return
		}
		defer func() { <-h.sem }()
		ctx, cancel := context.WithTimeout(h.ctx, storeCallTimeout)
		t, err := h.store.Status(ctx, c.ref)
		cancel()
		h.apply(c, t, err, time.Time{}, srcRenew)
	})
}

// ping sends c a keep-alive ping.
func (h *Hub) ping(c *conn) {
	h.wg.Go(func() {
		defer c.pinging.Store(false)
		h.pingNow(c)
	})
}

// pingNow pings c and waits up to PongTimeout for the pong; a missing pong drops c.
func (h *Hub) pingNow(c *conn) bool {
	w := c.wsc.Load()
	if w == nil || c.dead() {
		return false
	}
	asked := time.Now()
	ch := w.Ping() // closed at the pong; a failed write kills c (and counts a timeout)
	t := time.NewTimer(h.cfg.PongTimeout)
	defer t.Stop()
	for {
		select {
		case <-ch:
			return true
		case <-c.done:
			return false // the connection ended meanwhile (the client left): drops nobody
		case <-h.ctx.Done():
			return false
		case <-t.C:
		}
		wait, alive := pongDue(asked, w.PingSent(), w.Heard(), time.Now(), h.cfg.PongTimeout)
		if alive {
			return true
		}
		if wait > 0 {
			t.Reset(wait)
			continue
		}
		// No pong in time: the client is gone or frozen.
		if !c.dead() {
			h.droppedPing.Add(1)
		}
		c.kill(reasonPing)
		return false
	}
}

// pongDue says whether the client of a ping asked for at asked is alive, and otherwise how
// much longer to wait for its pong (0: it is gone). The PongTimeout runs from the ping's write
// (sent), not from asking: under load the hub's own writers may hold a ping for seconds, and a
// client is not dropped for the server's backlog (issue 22: an overloaded instance dropped
// healthy sockets as silent while its writers were behind); a ping not written yet is waited
// for a PongTimeout more (a write that never goes out ends the connection by its
// WriteTimeout). Any frame heard from the client after the write counts as its answer.
func pongDue(asked, sent, heard, now time.Time, timeout time.Duration) (wait time.Duration, alive bool) {
	switch {
	case sent.Before(asked):
		return timeout, false // still queued behind our own writes
	case heard.After(sent):
		return 0, true
	}
	return max(sent.Add(timeout).Sub(now), 0), false
}

// apply sends c what a Status call said about its ticket, moving c's state forward only: an
// answer older than what c was already told is dropped.
func (h *Hub) apply(c *conn, t queue.Ticket, err error, ts time.Time, src source) {
	var (
		msg   []byte
		state connState
	)
	switch {
	case errors.Is(err, queue.ErrTicketNotFound):
		msg, state = simpleMessage(TypeNotFound, h.now()), stateTerminal
	case err != nil:
		if h.ctx.Err() == nil {
			h.log.Warn("push: reading a ticket failed", "event", c.ref.Event, "err", err)
		}
	case t.Status == queue.StatusAdmitted:
		tok, merr := h.admissions.MintUser(c.ref.Event, c.ticketID, t.Number, t.UserKey, t.AdmittedUntil, t.Now)
		if merr != nil {
			h.log.Error("push: minting an admission token failed", "event", c.ref.Event, "err", merr)
			break
		}
		if ts.IsZero() {
			ts = t.Now
		}
		var redirect string
		ctx, cancel := context.WithTimeout(h.ctx, storeCallTimeout)
		if e, gerr := h.events.Get(ctx, c.ref.Event); gerr == nil { // the cache, SQL on a miss
			redirect = e.RedirectURL
		}
		cancel()
		msg, state = admittedMessage(ts, tok, t, redirect), stateAdmitted
	case t.Status == queue.StatusQueued:
		msg, state = positionMessage(h.now(), t.Position, t.Waiting, h.eta(t)), stateWaiting
	default:
		msg, state = simpleMessage(terminalType(t.Status), t.Now), stateTerminal
	}

	r := c.room
	r.mu.Lock()
	defer r.mu.Unlock()
	if src != srcConnect {
		c.pending = false
	}
	if msg == nil || c.state == stateTerminal {
		return
	}
	now := h.now()
	switch state {
	case stateTerminal:
		c.state = stateTerminal
		c.send(outMsg{data: msg, last: true})
	case stateAdmitted:
		if c.state == stateAdmitted && src != srcRenew {
			// Already told. A read of a session still live moves the end that the tick waits
			// for before reading it again (room.tickConn).
			c.until = t.AdmittedUntil
			return
		}
		was := c.state
		c.state, c.until, c.renewedAt = stateAdmitted, t.AdmittedUntil, now
		if !c.send(outMsg{data: msg}) {
			return
		}
		switch {
		case src == srcRenew:
			h.renewals.Add(1)
		case was == stateNew && src == srcConnect:
		case src == srcLocal:
			h.deliveredLocal.Add(1)
		case src == srcRemote:
			h.deliveredRemote.Add(1)
		case src == srcResync:
			h.deliveredResync.Add(1)
		}
	case stateWaiting:
		switch c.state {
		case stateNew:
			if c.send(outMsg{data: msg}) {
				c.state = stateWaiting
				c.pos, c.waiting, c.eta, c.posAt = t.Position, t.Waiting, h.eta(t), now
			}
		case stateWaiting:
			c.pos = t.Position // exact: corrects the estimate; the tick sends it when due
		}
	}
}

// publisher sends the queued batch messages, in order, until the hub stops: whatever has
// queued up is sent in one pipelined round trip, so a slow Redis delays messages but the
// processor never waits.
func (h *Hub) publisher() {
	batch := make([]store.Message, 0, publishPipeline)
	// The ended tickets gathered for endedDelay from the first (Ended), then sent with what is
	// queued.
	var endedT *time.Timer
	var endedDue <-chan time.Time
	defer func() {
		if endedT != nil {
			endedT.Stop()
		}
	}()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.endedc:
			if endedDue == nil {
				endedT = time.NewTimer(endedDelay)
				endedDue = endedT.C
			}
			continue
		case <-endedDue:
			endedDue = nil
			if batch = h.endedMessages(batch[:0]); len(batch) == 0 {
				continue
			}
		case m := <-h.pubq:
			batch = append(batch[:0], m)
		}
	more:
		for len(batch) < publishPipeline {
			select {
			case m := <-h.pubq:
				batch = append(batch, m)
			default:
				break more
			}
		}
		for attempt := 0; attempt < 2 && len(batch) > 0 && h.ctx.Err() == nil; attempt++ {
			_ = loop.Guard("push publisher", h.log, func() error { batch = h.publishAll(batch); return nil })
		}
		if n := len(batch); n > 0 && h.ctx.Err() == nil {
			h.publishErrors.Add(int64(n))
			h.log.Warn("push: publishing admission batches failed; other instances heal them by their resync", "messages", n)
		}
	}
}

// publishAll sends msgs in one round trip and returns those that failed.
func (h *Hub) publishAll(msgs []store.Message) []store.Message {
	ctx, cancel := context.WithTimeout(h.ctx, publishTimeout)
	defer cancel()
	errs := h.notifier.Publish(ctx, msgs...)
	failed := msgs[:0]
	for i, m := range msgs {
		if errs != nil && errs[i] != nil {
			failed = append(failed, m)
			continue
		}
		h.published.Add(1)
	}
	return failed
}

// eta is a waiting ticket's ETA (s), the same figure the HTTP status tells (event.Event.ETA).
func (h *Hub) eta(t queue.Ticket) int64 {
	e, ok := h.events.Cached(t.Event)
	if !ok {
		e = event.Event{ID: t.Event}.WithDefaults()
	}
	return e.ETA(t.Position, t.Serving, t.Rate, t.Now)
}

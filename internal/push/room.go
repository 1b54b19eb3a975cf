package push

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
)

// servingSample is the serving counter as a tick read it.
type servingSample struct {
	at      time.Time
	serving int64
}

// source says how an admission reached a connection (for the counters).
type source uint8

const (
	srcConnect source = iota // the status read when the connection opened
	srcLocal                 // an admission batch of this instance
	srcRemote                // an admission batch of another instance, through Redis
	srcResync                // the periodic resync: nobody told us, the counters did
	srcRenew                 // a renewal of an admitted session
)

// batch is one admission step's range of the serving counter, From..To (places in line), and
// the store's time.
type batch struct {
	from, to int64
	ts       time.Time
	src      source
}

// maxPendingBatches bounds the batches queued for a room's worker; beyond it they are merged
// into one range (a Status call per local ticket in the range is all a delivery costs, so
// merging loses nothing but the exact batch time of the merged ones).
const maxPendingBatches = 256

// room is the part of the hub that concerns one event: the local connections indexed by
// ticket number, the subscription to the event's topic, and the worker that delivers
// admission batches.
type room struct {
	hub    *Hub
	event  string
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1: batches are waiting

	subscribed atomic.Bool  // the channel subscription is confirmed
	subscribes atomic.Int64 // confirmations so far (a second one means a resubscribe)
	healAll    atomic.Bool  // the next tick heals without the grace of one tick
	due        atomic.Bool  // kicked: tick at the next kick, not only at the next Tick

	// bmu guards batches only, so that queueing a batch (on the subscription's goroutine)
	// never waits for a tick walking the connections.
	bmu     sync.Mutex
	batches []batch

	mu         sync.Mutex
	conns      map[int64]*conn // by ticket number, chained by conn.next
	places     linePlaces      // the line's places (a drawn pre-queue), as of the last tick
	n          int             // connections in conns
	emptySince time.Time
	samples    []servingSample // the serving counter at recent ticks, oldest first
	statsAt    time.Time
	lastStats  queue.Stats
}

func (h *Hub) newRoom(event string) *room {
	ctx, cancel := context.WithCancel(h.ctx)
	r := &room{
		hub: h, event: event, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), conns: make(map[int64]*conn),
	}
	h.wg.Go(r.work)
	h.wg.Go(r.subscribe)
	return r
}

// linePlaces maps ticket numbers to places in line and back (see package queue): a ticket's
// place is its number, but for the N tickets of a pre-queue drawn at the opening, whose places
// are the draw's permutation (built here from the seed and N the store's counters reveal, once
// per line); while that draw is pending they have none yet (place 0).
type linePlaces struct {
	read    bool // update was called
	pending bool
	gen     uint32
	n       int64
	d       *draw.Draw
}

// update reads the draw of st (the event's counters). A draw that cannot be built (a
// malformed seed: never from a store) is left out: places are numbers then.
func (lp *linePlaces) update(st queue.Stats) {
	lp.read, lp.pending = true, st.DrawPending
	if st.DrawSeed == nil || st.DrawN == 0 {
		lp.gen, lp.n, lp.d = st.Generation, 0, nil
		return
	}
	if lp.d != nil && lp.gen == st.Generation && lp.n == st.DrawN {
		return
	}
	d, err := draw.New(st.DrawSeed, st.DrawN)
	if err != nil {
		d = nil
	}
	lp.gen, lp.n, lp.d = st.Generation, st.DrawN, d
}

// place is ticket number n's place (0 while the draw is pending).
func (lp *linePlaces) place(n int64) int64 {
	switch {
	case lp.pending:
		return 0
	case lp.d != nil && n <= lp.n:
		return lp.d.Place(n)
	}
	return n
}

// number is the ticket number at place p.
func (lp *linePlaces) number(p int64) int64 {
	if lp.d != nil && !lp.pending && p <= lp.n {
		return lp.d.Number(p)
	}
	return p
}

// addBatch queues an admission batch for delivery to the local connections in its range.
func (r *room) addBatch(b batch) {
	r.bmu.Lock()
	if len(r.batches) >= maxPendingBatches {
		m := &r.batches[len(r.batches)-1]
		m.from, m.to = min(m.from, b.from), max(m.to, b.to)
		m.ts = b.ts
	} else {
		r.batches = append(r.batches, b)
	}
	r.bmu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	// The line moved: the waiting connections hear their new places at the next tick, run
	// now (kicks keep ticks minKickGap apart) rather than up to a Tick later.
	r.hub.kickRoom(r)
}

// work delivers queued batches until the room ends.
func (r *room) work() {
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.wake:
		}
		r.bmu.Lock()
		bs := r.batches
		r.batches = nil
		r.bmu.Unlock()
		for _, b := range bs {
			_ = loop.Guard("push delivery", r.hub.log, func() error { r.deliver(b); return nil })
		}
	}
}

// deliver asks the store for the status of every local ticket in b's range that was not told
// it is admitted (the call claims the admission and gives a fresh admitted_until), and sends
// each its answer. The cost is O(min(range, local connections)) plus one Status per ticket.
// The range is of places: when the room last saw the line's draw pending (the batch says the
// line has opened since), or has not read the line's places yet, it reads them first (one
// Stats, once per room and opening). Not only for an event whose cached configuration has a
// pre-queue to draw: the configuration that opens the line (opens_at moved to now, or
// removed) may reach the cache before the first batch does, and the first batch after a
// drawn opening then went to the tickets numbered, not placed, 1 to 31 (TestFleetDelivery, on
// a machine whose first tick came after the opening's first batch: a resync a grace later).
func (r *room) deliver(b batch) {
	r.mu.Lock()
	stale := r.places.pending || !r.places.read
	r.mu.Unlock()
	if stale {
		if st, ok := r.readStats(); ok {
			r.mu.Lock()
			r.places.update(st)
			r.mu.Unlock()
		}
	}
	var targets []*conn
	take := func(c *conn) {
		for ; c != nil; c = c.next {
			if (c.state == stateNew || c.state == stateWaiting) && !c.pending {
				c.pending = true
				targets = append(targets, c)
			}
		}
	}
	r.mu.Lock()
	if b.to-b.from+1 <= int64(len(r.conns)) {
		for p := b.from; p <= b.to; p++ {
			take(r.conns[r.places.number(p)])
		}
	} else {
		for n, c := range r.conns {
			if p := r.places.place(n); p >= b.from && p <= b.to {
				take(c)
			}
		}
	}
	r.mu.Unlock()
	for _, c := range targets {
		r.hub.check(c, b.ts, b.src)
	}
}

// connsOf returns the connections of the tickets numbered ns of line generation gen that have
// not been told a final status.
func (r *room) connsOf(gen uint32, ns []int64) []*conn {
	var out []*conn
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range ns {
		for c := r.conns[n]; c != nil; c = c.next {
			if c.ref.Generation == gen && c.state != stateTerminal {
				out = append(out, c)
			}
		}
	}
	return out
}

// add registers c, unless its ticket has limit connections here already. Called with the
// hub's mutex held.
func (r *room) add(c *conn, limit int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for o := r.conns[c.ref.Number]; o != nil; o = o.next {
		if n++; n >= limit {
			return false
		}
	}
	c.room = r
	c.next = r.conns[c.ref.Number]
	r.conns[c.ref.Number] = c
	r.n++
	return true
}

// remove unregisters c.
func (r *room) remove(c *conn, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.conns[c.ref.Number]
	if p == c {
		if c.next == nil {
			delete(r.conns, c.ref.Number)
		} else {
			r.conns[c.ref.Number] = c.next
		}
	} else {
		for ; p != nil && p.next != c; p = p.next {
		}
		if p == nil {
			return // not registered
		}
		p.next = c.next
	}
	c.next = nil
	r.n--
	if r.n == 0 {
		r.emptySince = now
	}
}

// healSoon makes the next tick, run at once, heal every connection whose number the serving
// counter has passed, without leaving ResyncGrace for a batch message (after a resubscribe,
// which may have lost messages, or a hint).
func (r *room) healSoon() {
	r.healAll.Store(true)
	r.hub.kickRoom(r)
}

// tick reads the event's counters (one store call), sends throttled positions and stats,
// schedules keep-alives and session renewals, and heals connections that a lost or late batch
// message left waiting though the serving counter passed them ResyncGrace ago. The store calls
// and pings it decides on run after the room's mutex is released.
func (r *room) tick(now time.Time) {
	st, ok := r.readStats()
	if !ok {
		r.keepAlives(now)
		return
	}
	v := r.view(now, st)
	var w tickWork
	r.mu.Lock()
	r.places.update(st)
	v.grace = r.graceLocked(now, st)
	v.stats = r.statsDueLocked(now, st)
	for _, c := range r.conns {
		for ; c != nil; c = c.next {
			if !c.dead() {
				r.tickConn(c, &v, &w)
			}
		}
	}
	r.mu.Unlock()
	w.run(r.hub)
}

// tickView is what one tick knows of its event.
type tickView struct {
	now        time.Time
	st         queue.Stats
	ev         event.Event   // the event's configuration (ETAs: event.Event.ETA, as the HTTP status)
	closed     bool          // the event's closing time has passed
	renewEvery time.Duration // how often a visible admitted page renews its session: session_ttl/3
	grace      int64         // waiting tickets at or below this number are healed
	stats      []byte        // the stats message due this tick, nil when none is
}

// tickWork is what a tick found to do once the room's mutex is released.
type tickWork struct {
	heal  []*conn // waiting connections to check with Status
	renew []*conn // admitted connections whose session to renew
	ping  []*conn // WebSocket connections due a keep-alive ping
}

// readStats reads the event's counters; ok is false when there are none: a deleted event
// ends every connection, any other failure is logged and waits for the next tick.
func (r *room) readStats() (_ queue.Stats, ok bool) {
	h := r.hub
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	st, err := h.store.Stats(ctx, r.event)
	cancel()
	switch {
	case err == nil:
		return st, true
	case errors.Is(err, queue.ErrEventNotFound), errors.Is(err, event.ErrNotFound):
		// (The store's answer, or the registry's when its restore found no event in SQL.)
		if _, known := h.events.Cached(r.event); !known {
			r.endAll(TypeNotFound) // the event was deleted
		}
	case r.ctx.Err() == nil:
		h.log.Warn("push: reading the event's counters failed", "event", r.event, "err", err)
	}
	return st, false
}

// view returns what a tick at now with the counters st knows, but for grace and stats.
func (r *room) view(now time.Time, st queue.Stats) tickView {
	ev, ok := r.hub.events.Cached(r.event)
	if !ok {
		ev = event.Event{ID: r.event}.WithDefaults()
	}
	return tickView{
		now: now, st: st, ev: ev,
		closed:     !ev.ClosesAt.IsZero() && !st.Now.Before(ev.ClosesAt),
		renewEvery: ev.SessionTTL / 3,
	}
}

// graceLocked records this tick's serving counter and returns the serving counter as it stood
// ResyncGrace ago: tickets at or below it had their batch message's whole grace to arrive; the
// ones above are left to it. After a resubscribe or a hint (healAll), or once sold out, it is
// the serving counter itself. Called with r.mu held.
func (r *room) graceLocked(now time.Time, st queue.Stats) int64 {
	if n := len(r.samples); n > 0 && st.Serving < r.samples[n-1].serving {
		r.samples = r.samples[:0] // the line was reset (a new generation): old counters mean nothing
	}
	r.samples = append(r.samples, servingSample{now, st.Serving})
	var grace int64
	keep := 0
	for i, s := range r.samples {
		if now.Sub(s.at) >= r.hub.cfg.ResyncGrace {
			grace, keep = s.serving, i
		}
	}
	r.samples = r.samples[keep:] // the newest old-enough sample stays: it is the next grace
	if r.healAll.Swap(false) || st.SoldOut {
		grace = st.Serving
	}
	return grace
}

// statsDueLocked returns the stats message to send this tick, nil when the last one went out
// less than StatsInterval ago or the counters it carries did not change. Called with r.mu
// held.
func (r *room) statsDueLocked(now time.Time, st queue.Stats) []byte {
	changed := st.Waiting != r.lastStats.Waiting || st.Active != r.lastStats.Active ||
		st.Serving != r.lastStats.Serving || r.statsAt.IsZero()
	if now.Sub(r.statsAt) < r.hub.cfg.StatsInterval || !changed {
		return nil
	}
	r.statsAt, r.lastStats = now, st
	return statsMessage(now, st)
}

// tickConn does a tick's part for c, a live connection (called with r.mu held): a waiting one
// is healed or told its place, an admitted one renews its session; either gets the stats and
// its keep-alive when due.
func (r *room) tickConn(c *conn, v *tickView, w *tickWork) {
	switch c.state {
	case stateWaiting:
		r.tickWaiting(c, v, w)
	case stateAdmitted:
		if c.ref.Generation != v.st.Generation && !c.pending {
			// The line was made anew (the event deleted and created again, or reset): this
			// session's ticket is gone with the old one (Status: not_found).
			c.pending = true
			w.heal = append(w.heal, c)
			return
		}
		if c.wsc.Load() != nil && c.visible.Load() && (c.renew.Load() || v.now.Sub(c.renewedAt) >= v.renewEvery) &&
			c.pinging.CompareAndSwap(false, true) {
			c.renew.Store(false)
			c.pingAt = v.now
			w.renew = append(w.renew, c)
		} else if !c.pending && !c.until.IsZero() && !v.st.Now.Before(c.until) {
			// The session's end as last told has passed by the store's clock, and nothing
			// renewed it here (an SSE stream, a hidden page, a client that never says it is
			// visible): read it, so that the stream hears `expired` when it ended (idle,
			// unclaimed, or at session_max_s), or learns its new end when the ticket's own
			// reads renewed it meanwhile (Hub.apply). Past its end the read cannot renew it.
			c.pending = true
			w.heal = append(w.heal, c)
		}
	default:
		return
	}
	// A waiting connection told its place (which carries the line's length) within the stats
	// interval needs no stats message: half the messages of a moving line (issue 22).
	if v.stats != nil && (c.state != stateWaiting || v.now.Sub(c.posAt) >= r.hub.cfg.StatsInterval) {
		c.send(outMsg{data: v.stats, droppable: true})
	}
	if v.now.Sub(c.pingAt) >= r.pingEvery(c) {
		r.keepAlive(c, v.now, w)
	}
}

// pingEvery is c's keep-alive period: HeartbeatInterval for an SSE stream, else PingInterval.
func (r *room) pingEvery(c *conn) time.Duration {
	if c.sse {
		return r.hub.cfg.HeartbeatInterval
	}
	return r.hub.cfg.PingInterval
}

// keepAlives sends the keep-alives due at now, and nothing else: a tick that could not read
// the event's counters (the store down or slow) still keeps its streams alive, so that pages
// do not take them for dead and connect again, all together, while the store is away (an SSE
// page does after a few HeartbeatIntervals of silence).
func (r *room) keepAlives(now time.Time) {
	var w tickWork
	r.mu.Lock()
	for _, c := range r.conns {
		for ; c != nil; c = c.next {
			if !c.dead() && (c.state == stateWaiting || c.state == stateAdmitted) && now.Sub(c.pingAt) >= r.pingEvery(c) {
				r.keepAlive(c, now, &w)
			}
		}
	}
	r.mu.Unlock()
	w.run(r.hub)
}

// tickWaiting heals c when its ticket is stale (another generation, or passed by the serving
// counter longer than ResyncGrace ago) or the event closed since its last check, and otherwise
// sends it its estimated place when due.
func (r *room) tickWaiting(c *conn, v *tickView, w *tickWork) {
	if c.pending {
		return
	}
	place := r.places.place(c.ref.Number) // 0: the pre-queue's draw is pending
	stale := c.ref.Generation != v.st.Generation || (place > 0 && place <= v.grace)
	// A ticket whose number the store lost (void since a resume) is skipped by admissions
	// until its holder shows up: this connection shows it up now, before the serving counter
	// passes it (passed, it would be owed its admission above max_active).
	void := v.st.VoidFrom > 0 && c.checkedVoid != v.st.VoidFrom && c.ref.Number >= v.st.VoidFrom && c.ref.Number <= v.st.VoidTo
	if stale || void || (v.closed && !c.checkedClosed) {
		c.checkedClosed = c.checkedClosed || v.closed
		if void {
			c.checkedVoid = v.st.VoidFrom
		}
		c.pending = true
		w.heal = append(w.heal, c)
		return
	}
	if place == 0 || place <= v.st.Serving {
		return // not placed yet (told at the opening), or admitted a moment ago: its batch is being delivered
	}
	p := estimatePosition(place, v.st)
	if c.pos > 0 {
		p = min(p, c.pos) // nobody joins ahead: a place never goes back
	}
	e := v.ev.ETA(p, v.st.Serving, v.st.Rate, v.st.Now) // the same figure as the HTTP status
	cfg := &r.hub.cfg
	if positionDue(placeView{c.pos, c.waiting, c.eta}, placeView{p, v.st.Waiting, e}, v.now.Sub(c.posAt), positionEvery(p, cfg.PositionInterval, cfg.StatsInterval), cfg.StatsInterval) &&
		c.send(outMsg{data: positionMessage(v.now, p, v.st.Waiting, e), droppable: true}) {
		c.pos, c.waiting, c.eta, c.posAt = p, v.st.Waiting, e, v.now
	}
}

// keepAlive keeps c alive at now: an SSE ping event, or a WebSocket ping unless one (or a
// renewal) is in flight. Called with r.mu held.
func (r *room) keepAlive(c *conn, now time.Time, w *tickWork) {
	switch {
	case c.sse:
		c.pingAt = now
		c.send(outMsg{comment: true, droppable: true})
	case c.wsc.Load() != nil && c.pinging.CompareAndSwap(false, true):
		c.pingAt = now
		w.ping = append(w.ping, c)
	}
}

// run starts the store calls and pings a tick decided on.
func (w *tickWork) run(h *Hub) {
	for _, c := range w.heal {
		h.check(c, time.Time{}, srcResync)
	}
	for _, c := range w.renew {
		h.renewSession(c)
	}
	for _, c := range w.ping {
		h.ping(c)
	}
}

// positionScale is the number of places, from the front, whose new place goes out every
// PositionInterval; behind them the interval grows with the place (see positionEvery).
const positionScale = 1000

// positionEvery is the least time between two new places told to a connection at place pos:
// every base (PositionInterval) for the first positionScale places, then base × pos /
// positionScale, at most ceiling (StatsInterval). A line moving at admit_rate changes every
// waiting place every tick; told every second, W waiting people cost W messages a second to
// write and to read (issue 22: 50,000 waiting on one 2-core machine spent most of its CPU on
// them, and pongs and admissions queued behind them for seconds). Scaled, they cost about
// positionScale × (1 + ln(ceiling/base)) + W × base/ceiling a second: ~11,600 instead of
// 50,000 for W = 50,000 with the defaults. Near the front, where the place matters and the
// wait is short, nothing changes; far back a place is at most 5 s old.
func positionEvery(pos int64, base, ceiling time.Duration) time.Duration {
	if pos <= positionScale {
		return base
	}
	return min(time.Duration(float64(base)*float64(pos)/positionScale), max(ceiling, base))
}

// placeView is what a position message tells: the place, the line's length and the ETA (s).
type placeView struct{ pos, waiting, eta int64 }

// positionDue reports whether a waiting connection last told was, since ago, is to be told
// now. A new place goes out at most every posEvery (positionEvery of its place), so that a
// moving line reaches every connection within about posEvery plus a tick; the
// line's length or the ETA changing alone (a crowd joining behind, the admission rate
// drifting while the line stands still) at most every minorEvery (StatsInterval), so that
// they do not keep every connection inside its position interval when its place does change.
func positionDue(was, now placeView, ago, posEvery, minorEvery time.Duration) bool {
	switch {
	case now.pos != was.pos:
		return ago >= posEvery
	case now.waiting != was.waiting || now.eta != was.eta:
		return ago >= minorEvery
	}
	return false
}

// endAll sends every connection the final message typ (the event is gone).
func (r *room) endAll(typ string) {
	msg := simpleMessage(typ, r.hub.now())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		for ; c != nil; c = c.next {
			if c.state != stateTerminal {
				c.state = stateTerminal
				c.send(outMsg{data: msg, last: true})
			}
		}
	}
}

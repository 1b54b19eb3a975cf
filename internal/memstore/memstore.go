// Package memstore is the in-process Store of the embedded deployment: the same line model and
// the same rules as the Redis store (see package queue), kept in memory under one mutex per
// event, and saved to a snapshot on graceful shutdown.
package memstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
)

// Config configures a Store.
type Config struct {
	// Now is the store's clock. Defaults to time.Now.
	Now func() time.Time
	// Numbers keeps the lines' numbers durable (sqlstore.DB; see durable.go). Nil: numbers are
	// unbounded and a line made again starts from 1.
	Numbers queue.Numbers
}

// Store is an in-memory queue.Store. It is safe for concurrent use.
type Store struct {
	now   func() time.Time
	mu    sync.RWMutex
	lines map[string]*line
	// sessionEnded, set by NewSales, releases the hold of a ticket that left or whose session
	// ended. Called with the line's lock held (the lock order is line, then inventory).
	sessionEnded func(event string, gen uint32, n, nowMS int64)

	numbers queue.Numbers
	topUps  queue.TopUps // the background reservations of line numbers ahead (durable.go)
	pace    queue.Pace

	autoMu sync.Mutex
	auto   map[string]*autoRecord // admission mode auto: signals and controller state (auto.go)
}

var _ queue.Store = (*Store)(nil)

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{now: cfg.Now, lines: make(map[string]*line), numbers: cfg.Numbers, auto: map[string]*autoRecord{}}
}

// Ticket marks, two bits per ticket number; the same values as the Redis store's bitfield.
const (
	markLive      = 0
	markLeft      = 1
	markEnded     = 2
	markCompleted = 3
)

// line is one event's waiting room. All fields are guarded by mu.
type line struct {
	mu  sync.Mutex
	cfg queue.EventConfig
	gen uint32

	seq, serving  int64 // serving counts places (see package queue)
	admittedTotal int64
	// leftWaiting and unclaimedTotal are queue.Stats' LeftWaiting and Unclaimed.
	leftWaiting, unclaimedTotal int64
	// left: the places > serving whose ticket left while waiting, ascending (before the
	// opening of a pending draw: the numbers, converted by settle).
	left       []int64
	marks      []byte            // 2 bits per ticket number
	active     map[int64]int64   // claimed admitted sessions: number -> expiry (unix ms)
	ends       map[int64]int64   // their absolute ends, admission + SessionMax (unix ms)
	expiries   expiryHeap[int64] // (expiry, number), lazily deleted
	batches    []batch           // processor admissions still claimable, ascending by lo
	unclaimed  int64             // sum of batches[i].unclaimed
	users      map[string]int64
	idem       [2]idemBucket    // idempotency keys of joins, by epoch parity (see lua/join.lua)
	userOf     map[int64]string // ticket number -> user key (named tickets)
	soldOut    bool
	soldRanges []batch // waiting ranges passed over by sell-outs (Lo, Hi), ascending

	// autoSet: cfg's MaxActive and AdmitRate are the controller's (SetControl), kept by
	// configurations in mode auto (queue.EventConfig.Auto).
	autoSet bool

	tokens   float64 // admit_rate token bucket
	owed     float64 // admissions owed by late steps (refill); not in the snapshot
	tokensMS int64
	rate     float64 // moving average of admissions per second
	winStart int64
	winCount int64

	// The clients' buckets of joins (as the rl hashes of lua/join.lua) and the reads per ticket
	// in the current fixed window (as the polls hash of lua/status.lua).
	joins joinBuckets
	polls windowCount[int64]
	// prequeued counts each client's tickets of the pre-queue (queue.JoinParams.TicketLimit, as
	// the tpc hash of lua/join.lua), until the opening (settle drops it).
	prequeued map[string]int64

	// Durable numbers (durable.go): the ceilings (0 = unbounded), the void numbers of a resume,
	// its pending range pl..ph (pn present; ph 0 = none, the rest of a range admitted 4,096
	// places at a time) and its pool: the batches whose Lo is at or below poolTop, whose
	// unclaimed admissions (poolUnclaimed, not in unclaimed) count within what the others leave
	// of max_active (freeSlots).
	sc, vc         int64
	void           map[int64]struct{}
	voidLo, voidHi int64 // the range of void numbers of the last resume (queue.Stats.VoidFrom, VoidTo)
	pl, ph, pn     int64
	poolTop        int64
	poolUnclaimed  int64
	// passedQ: void numbers the serving counter had passed whose holders showed up when the
	// room was full (or others waited so), in that order: each step admits them first, within
	// max_active (status; lua/common.lua's pq). They stay void until admitted. Not in the
	// snapshot: after a restart each queues again at its holder's next read.
	passedQ []int64

	// Used challenges (queue.JoinParams.ChallengeID): id -> when it is forgotten (unix ms),
	// and the same as a heap to forget them in order (as lua/join.lua's ch: keys).
	challenges      map[string]int64
	challengeForget expiryHeap[string]

	// The opening (settle): opened once the line's first step at or after OpensAt is done.
	// Until then drawPending says that the pre-queue is to be drawn (cfg.DrawSeed set, nobody
	// admitted or passed over). Then drawSeed and drawN are the draw made (nil: none), and dr
	// its permutation (tickets 1..drawN).
	opened      bool
	drawPending bool
	drawSeed    []byte
	drawN       int64
	dr          *draw.Draw
	// drawSaved: drawN is recorded with the durable numbers (durable.go's saveDraw); until
	// then, with Config.Numbers, nobody is told a drawn position or admitted.
	drawSaved bool
}

// settle makes the line's opening at its first step at or after OpensAt, once: with a
// pending draw, the N = seq tickets that joined before it get their drawn places (and those
// of them that left, theirs in left). The rule of lua/common.lua's settle_opening.
func (ln *line) settle(nowMS int64) {
	if ln.opened || (!ln.cfg.OpensAt.IsZero() && nowMS < ln.cfg.OpensAt.UnixMilli()) {
		return
	}
	ln.opened = true
	ln.prequeued = nil // nothing is capped from the opening on
	if !ln.drawPending {
		return
	}
	ln.drawPending = false
	ln.drawSeed, ln.drawN = ln.cfg.DrawSeed, ln.seq
	if ln.seq == 0 {
		return
	}
	d, err := draw.New(ln.drawSeed, ln.seq)
	if err != nil { // a seed of the wrong length (the event layer makes them): no draw
		ln.drawSeed, ln.drawN = nil, 0
		return
	}
	ln.dr = d
	for i, n := range ln.left {
		ln.left[i] = d.Place(n)
	}
	slices.Sort(ln.left)
}

// place is ticket n's place in line: its number, or its drawn place; 0 while the draw of the
// pre-queue is pending.
func (ln *line) place(n int64) int64 {
	switch {
	case ln.drawPending:
		return 0
	case ln.dr != nil && n >= 1 && n <= ln.drawN:
		return ln.dr.Place(n)
	}
	return n
}

// wantsDraw sets drawPending from cfg until the opening (see settle).
func (ln *line) wantsDraw() {
	if !ln.opened {
		ln.drawPending = len(ln.cfg.DrawSeed) > 0 && ln.serving == 0 && !ln.soldOut
	}
}

// useChallenge records the challenge of a join that makes a ticket, the rule of lua/join.lua:
// false when it was recorded already (or the join is RetryOnly). It first forgets the
// challenges whose time is up.
func (ln *line) useChallenge(p queue.JoinParams, nowMS int64) bool {
	ln.forgetChallenges(nowMS)
	switch {
	case p.RetryOnly:
		return false
	case p.ChallengeID == "":
		return true
	}
	if _, used := ln.challenges[p.ChallengeID]; used {
		return false
	}
	if ln.challenges == nil {
		ln.challenges = make(map[string]int64)
	}
	at := max(p.ChallengeExpires.UnixMilli(), nowMS) + queue.ChallengeGrace.Milliseconds()
	ln.challenges[p.ChallengeID] = at
	ln.challengeForget.push(at, p.ChallengeID)
	return true
}

// unuseChallenge takes back the challenge useChallenge recorded for a join then refused.
// (Its entry in challengeForget stays: forgetting an id that is not there does nothing.)
func (ln *line) unuseChallenge(p queue.JoinParams) {
	if p.ChallengeID != "" && !p.RetryOnly {
		delete(ln.challenges, p.ChallengeID)
	}
}

// countTicket counts a new ticket of p's client in the pre-queue, or refuses it with a
// *queue.RateLimitedError telling the time until the opening when the client made
// p.TicketLimit tickets of it already (queue.JoinParams.TicketLimit; the rule of lua/join.lua).
// From the opening on it counts nothing.
func (ln *line) countTicket(p queue.JoinParams, nowMS int64) error {
	if p.ClientKey == "" || p.TicketLimit <= 0 || ln.opened {
		return nil
	}
	if ln.prequeued[p.ClientKey] >= p.TicketLimit {
		return &queue.RateLimitedError{RetryAfter: time.Duration(ln.cfg.OpensAt.UnixMilli()-nowMS) * time.Millisecond, Prequeue: true}
	}
	if ln.prequeued == nil {
		ln.prequeued = make(map[string]int64)
	}
	ln.prequeued[p.ClientKey]++
	return nil
}

// forgetChallenges drops the used challenges due at nowMS.
func (ln *line) forgetChallenges(nowMS int64) {
	for {
		e, ok := ln.challengeForget.popDue(nowMS)
		if !ok {
			return
		}
		delete(ln.challenges, e.v)
	}
}

// windowCount counts per key in fixed windows aligned on the Unix epoch.
type windowCount[K comparable] struct {
	start  int64 // the window's start, unix ms
	counts map[K]int64
}

// add counts one of key in the window of length win at nowMS (ms), or refuses it with a
// *queue.RateLimitedError once key made limit in the window (the rule of the Redis store's
// status.lua).
func (w *windowCount[K]) add(key K, limit, win, nowMS int64) error {
	ws := nowMS - nowMS%win
	if ws != w.start || w.counts == nil {
		w.start, w.counts = ws, map[K]int64{}
	}
	if w.counts[key] >= limit {
		return &queue.RateLimitedError{RetryAfter: time.Duration(ws+win-nowMS) * time.Millisecond}
	}
	w.counts[key]++
	return nil
}

// limitJoin takes a join of p's client from its bucket, or refuses it when the bucket is
// empty (queue.JoinParams.ClientKey).
func (ln *line) limitJoin(p queue.JoinParams, nowMS int64) error {
	win := p.JoinWindow.Milliseconds()
	if p.ClientKey == "" || p.JoinLimit <= 0 || win <= 0 || p.JoinLimit > queue.MaxJoinSpan/win {
		return nil
	}
	return ln.joins.take(p.ClientKey, p.JoinLimit, win, nowMS)
}

// joinBuckets are the clients' token buckets of joins, the rule of the Redis store's
// join.lua: a client's theoretical arrival time (GCRA), in 1/lim ms since the start of the
// window of win ms (aligned on the Unix epoch) that holds it, kept for the current window and
// the one before (a TAT is at most one window ahead of its join, so older ones are past). A
// TAT at or before now is no state at all.
type joinBuckets struct {
	start, win, lim int64            // the current window and the limits it was made for
	cur, old        map[string]int64 // TATs written in the current window and the one before
}

// take takes one join of key from its bucket of lim joins refilled at lim per win ms, or
// refuses it with a *queue.RateLimitedError telling when the next passes.
func (b *joinBuckets) take(key string, lim, win, nowMS int64) error {
	ws := nowMS - nowMS%win
	span, at := win*lim, (nowMS-ws)*lim
	if b.start != ws || b.win != win || b.lim != lim || b.cur == nil {
		old := b.cur
		if b.start != ws-win || b.win != win || b.lim != lim {
			old = nil
		}
		*b = joinBuckets{start: ws, win: win, lim: lim, cur: map[string]int64{}, old: old}
	}
	tat, ok := b.cur[key]
	if !ok {
		if t, ok := b.old[key]; ok {
			tat = t - span
		}
	}
	tat = max(tat, at) + win
	if tat-at > span {
		return &queue.RateLimitedError{RetryAfter: time.Duration((tat-span-at+lim-1)/lim) * time.Millisecond}
	}
	b.cur[key] = tat
	return nil
}

// idemBucket holds the idempotency keys of one epoch of queue.IdempotencyWindow.
type idemBucket struct {
	epoch int64
	keys  map[string]int64 // idempotency key -> ticket number
}

// idempotent returns the ticket number a join with key made in this epoch or the one before
// (0: none), and the bucket a new join records it in.
func (ln *line) idempotent(key string, nowMS int64) (int64, *idemBucket) {
	ep := nowMS / queue.IdempotencyWindow.Milliseconds()
	cur, old := &ln.idem[ep%2], &ln.idem[(ep+1)%2]
	if cur.epoch != ep || cur.keys == nil {
		*cur = idemBucket{epoch: ep, keys: map[string]int64{}}
	} else if n, ok := cur.keys[key]; ok {
		return n, cur
	}
	if old.epoch == ep-1 {
		if n, ok := old.keys[key]; ok {
			return n, cur
		}
	}
	return 0, cur
}

type batch struct {
	Lo, Hi, Deadline, Unclaimed int64
	// Admitted is when the batch was admitted (unix ms; 0 in snapshots made before it was
	// kept: Deadline - ClaimTTL is used then).
	Admitted int64
}

func (s *Store) get(event string) (*line, error) {
	s.mu.RLock()
	ln := s.lines[event]
	s.mu.RUnlock()
	if ln == nil {
		return nil, fmt.Errorf("%w: %s", queue.ErrEventNotFound, event)
	}
	return ln, nil
}

// PutEvent implements queue.Store.
//
// With Config.Numbers, a new line takes its generation and numbers from there (see durable.go).
func (s *Store) PutEvent(ctx context.Context, cfg queue.EventConfig, generation uint32) (uint32, error) {
	var rec, next queue.LineRecord
	if generation != 0 && s.numbers != nil {
		if _, err := s.get(cfg.ID); err != nil {
			// Reserved before the lock: the database is not called under it.
			var err error
			if rec, err = s.numbers.Line(ctx, cfg.ID); err != nil {
				return 0, err
			}
			// The serving ceiling stays: an admission step raises it to exactly what it admits.
			if next, err = s.numbers.Reserve(ctx, cfg.ID, rec.SeqCeiling+queue.SeqBlock, rec.ServingCeiling); err != nil {
				return 0, err
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowMS := s.now().UnixMilli()
	if ln := s.lines[cfg.ID]; ln != nil {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		if cfg.Version < ln.cfg.Version {
			return ln.gen, nil
		}
		// A shorter claim TTL applies to admissions already waiting to be claimed, too.
		for i := range ln.batches {
			ln.batches[i].Deadline = min(ln.batches[i].Deadline, nowMS+cfg.ClaimTTL.Milliseconds())
		}
		if cfg.Auto && ln.autoSet {
			cfg.MaxActive, cfg.AdmitRate = ln.cfg.MaxActive, ln.cfg.AdmitRate
		}
		ln.autoSet = ln.autoSet && cfg.Auto
		ln.cfg = cfg
		ln.wantsDraw()
		ln.settle(nowMS)
		return ln.gen, nil
	}
	if generation == 0 {
		return 0, fmt.Errorf("%w: %s", queue.ErrEventNotFound, cfg.ID)
	}
	if rec.Generation != 0 {
		generation = rec.Generation
	}
	ln := &line{
		cfg: cfg, gen: generation,
		active:   make(map[int64]int64),
		users:    make(map[string]int64),
		tokens:   math.Floor(bucketSize(cfg.AdmitRate)),
		tokensMS: nowMS, winStart: nowMS,
	}
	if next.SeqCeiling > 0 {
		ln.resume(rec, next, nowMS)
	}
	ln.wantsDraw()
	ln.settle(nowMS)
	s.lines[cfg.ID] = ln
	return generation, nil
}

// DeleteEvent implements queue.Store.
func (s *Store) DeleteEvent(_ context.Context, event string) error {
	s.mu.Lock()
	delete(s.lines, event)
	s.mu.Unlock()
	s.autoMu.Lock()
	delete(s.auto, event) // its signals and controller (auto.go)
	s.autoMu.Unlock()
	return nil
}

// Stats implements queue.Store.
func (s *Store) Stats(_ context.Context, event string) (queue.Stats, error) {
	ln, err := s.get(event)
	if err != nil {
		return queue.Stats{}, err
	}
	now := s.now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.stats(now), nil
}

// stats is Stats of the line, settled at now. Called with ln.mu held.
func (ln *line) stats(now time.Time) queue.Stats {
	ln.settle(now.UnixMilli())
	var voidLo, voidHi int64
	if len(ln.void) > 0 {
		voidLo, voidHi = ln.voidLo, ln.voidHi
	}
	return queue.Stats{
		Generation:    ln.gen,
		Waiting:       ln.waiting(),
		Active:        ln.counted(),
		AdmittedTotal: ln.admittedTotal,
		Serving:       ln.serving,
		LastNumber:    ln.seq,
		Rate:          ln.etaRate(),
		SoldOut:       ln.soldOut,
		Now:           queue.FromMS(now.UnixMilli()),
		DrawPending:   ln.drawPending,
		DrawN:         ln.drawN,
		DrawSeed:      ln.drawSeed,
		VoidFrom:      voidLo,
		VoidTo:        voidHi,
		VoidLeft:      int64(len(ln.void)),
		Owed:          slices.Clone(ln.passedQ),
		LeftWaiting:   ln.leftWaiting,
		Unclaimed:     ln.unclaimedTotal,
	}
}

// View implements queue.Store.
func (s *Store) View(_ context.Context, p queue.ViewParams) (queue.View, error) {
	ln, err := s.get(p.Event)
	if err != nil {
		return queue.View{}, err
	}
	now := s.now()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	st := ln.stats(now)
	var over []int64
	var overFor time.Duration
	if win, nowMS := p.Window.Milliseconds(), now.UnixMilli(); len(p.Polls) > 0 && p.Limit > 0 && win > 0 && p.Generation == ln.gen {
		ws := nowMS - nowMS%win
		if ws != ln.polls.start || ln.polls.counts == nil {
			ln.polls.start, ln.polls.counts = ws, map[int64]int64{}
		}
		for _, c := range p.Polls {
			if ln.polls.counts[c.Number] += c.Count; ln.polls.counts[c.Number] > p.Limit {
				over = append(over, c.Number)
			}
		}
		overFor = time.Duration(ws+win-nowMS) * time.Millisecond
	}
	sn := queue.View{Stats: st, MaxActive: ln.cfg.MaxActive, AdmitRate: ln.cfg.AdmitRate,
		Plain: ln.opened && !ln.drawPending && (ln.dr == nil || ln.drawSaved) && ln.cfg.ClosesAt.IsZero() &&
			len(ln.void) == 0 && ln.ph == 0 && !ln.soldOut, Over: over, OverFor: overFor}
	if len(ln.left) <= queue.ViewLeftMax {
		sn.LeftAll = true
		for _, p := range ln.left {
			if p > ln.serving {
				sn.Left = append(sn.Left, p)
			}
		}
	}
	return sn, nil
}

// Join implements queue.Store.
func (s *Store) Join(ctx context.Context, p queue.JoinParams) (queue.Ticket, error) {
	atOnce := true // may ask for a serving ceiling to be admitted at once (once)
	for try := 0; ; try++ {
		t, need, err := s.join(p, atOnce)
		if nd, ok := err.(needDrawErr); ok {
			if err := s.saveDraw(ctx, p.Event, nd); err != nil {
				return queue.Ticket{}, fmt.Errorf("memstore: join: %w", err)
			}
			continue
		}
		if need == nil || err != nil {
			return t, err
		}
		if try == 4 {
			return queue.Ticket{}, fmt.Errorf("memstore: join: no durable line numbers left after %d reservations", try)
		}
		if err := s.raise(ctx, p.Event, need.seq, need.serving); err != nil {
			return queue.Ticket{}, fmt.Errorf("memstore: join: reserve line numbers: %w", err)
		}
		atOnce = atOnce && !need.atOnce
	}
}

func (s *Store) join(p queue.JoinParams, atOnce bool) (queue.Ticket, *needCeiling, error) {
	t, err := s.joinLocked(p, atOnce)
	if nc, ok := err.(needCeilingErr); ok {
		return queue.Ticket{}, &nc.needCeiling, nil
	}
	return t, nil, err
}

// needCeilingErr carries needCeiling out of joinLocked.
type needCeilingErr struct{ needCeiling }

func (needCeilingErr) Error() string { return "memstore: the line needs a higher durable ceiling" }

// joinLocked makes the join; atOnce false: a join that could be admitted at once only above
// the serving ceiling waits in line instead of asking for one (Join asked once already).
func (s *Store) joinLocked(p queue.JoinParams, atOnce bool) (queue.Ticket, error) {
	ln, err := s.get(p.Event)
	if err != nil {
		return queue.Ticket{}, err
	}
	nowMS := s.now().UnixMilli()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.closed(nowMS) {
		return queue.Ticket{}, queue.ErrEventClosed
	}
	if ln.soldOut {
		return queue.Ticket{}, queue.ErrSoldOut
	}
	if p.CountOnly {
		return queue.Ticket{}, ln.limitJoin(p, nowMS)
	}
	ln.settle(nowMS)
	if err := ln.unsavedDraw(s.numbers != nil); err != nil {
		return queue.Ticket{}, err
	}
	if ln.sc > 0 && ln.seq >= ln.sc {
		return queue.Ticket{}, needCeilingErr{needCeiling{seq: ln.seq, serving: ln.serving}}
	}
	if atOnce && ln.sc > 0 && ln.seq+1 > ln.vc && ln.waiting() == 0 && ln.open(nowMS) && ln.freeSlots() > 0 {
		// Admitted at once, it would pass the serving ceiling: ask for one that covers every free
		// slot (the joins behind it are admitted at once too).
		return queue.Ticket{}, needCeilingErr{needCeiling{seq: ln.seq, serving: ln.seq + ln.freeSlots(), atOnce: true}}
	}
	var prev int64
	if p.UserKey != "" {
		prev = ln.users[p.UserKey]
	}
	var bucket *idemBucket
	if p.IdempotencyKey != "" {
		var n int64
		if n, bucket = ln.idempotent(p.IdempotencyKey, nowMS); prev == 0 {
			prev = n
		}
	}
	if prev > 0 {
		if t, err := ln.status(p.Event, prev, nowMS, nil); err == nil && !t.Status.Terminal() {
			return t, nil
		}
	}
	// Only a join that may take a new ticket is counted: one that found its user's or its
	// idempotency key's live ticket was answered with it above, whatever the bucket holds, and
	// a retry that may only find its ticket makes nothing (useChallenge refuses it).
	if !p.RetryOnly {
		if err := ln.limitJoin(p, nowMS); err != nil {
			return queue.Ticket{}, err
		}
	}
	if !ln.useChallenge(p, nowMS) {
		return queue.Ticket{}, queue.ErrChallengeUsed
	}
	if err := ln.countTicket(p, nowMS); err != nil {
		ln.unuseChallenge(p)
		return queue.Ticket{}, err
	}
	waitingBefore := ln.waiting()
	ln.seq++
	n := ln.seq
	if p.UserKey != "" {
		if old, ok := ln.users[p.UserKey]; ok {
			delete(ln.userOf, old)
		}
		ln.users[p.UserKey] = n
		if ln.userOf == nil {
			ln.userOf = make(map[int64]string)
		}
		ln.userOf[n] = p.UserKey
	}
	if bucket != nil {
		bucket.keys[p.IdempotencyKey] = n
	}
	t := ln.ticket(p.Event, n, nowMS)
	t.Created = true
	if ln.drawPending { // a place is drawn at the opening
		t.Status = queue.StatusQueued
		t.Waiting = waitingBefore + 1
		return t, nil
	}
	t.Place = n // after the opening's draw, if any: behind it
	if waitingBefore == 0 && ln.open(nowMS) && ln.freeSlots() > 0 && (ln.sc == 0 || n <= ln.vc) && ln.takeToken(nowMS, 1) {
		ln.serving = n
		ln.left = ln.left[:0]
		ln.paceCount(1)
		ln.activate(n, nowMS, nowMS)
		t.Status, t.Serving, t.Waiting = queue.StatusAdmitted, n, 0
		t.AdmittedUntil = queue.FromMS(ln.active[n])
		t.UserKey = p.UserKey
		return t, nil
	}
	t.Status = queue.StatusQueued
	t.Position = waitingBefore + 1
	t.Waiting = waitingBefore + 1
	return t, nil
}

// Status implements queue.Store.
func (s *Store) Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	return s.Poll(ctx, queue.PollParams{Ref: ref})
}

// Poll implements queue.Store.
func (s *Store) Poll(ctx context.Context, p queue.PollParams) (queue.Ticket, error) {
	for {
		t, err := s.poll(p)
		if nd, ok := err.(needDrawErr); ok {
			if err := s.saveDraw(ctx, p.Ref.Event, nd); err != nil {
				return queue.Ticket{}, fmt.Errorf("memstore: status: %w", err)
			}
			continue
		}
		return t, err
	}
}

func (s *Store) poll(p queue.PollParams) (queue.Ticket, error) {
	ref := p.Ref
	ln, err := s.get(ref.Event)
	if err != nil {
		return queue.Ticket{}, err
	}
	nowMS := s.now().UnixMilli()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.settle(nowMS)
	if err := ln.unsavedDraw(s.numbers != nil); err != nil {
		return queue.Ticket{}, err // before the poll is counted: the call is made again
	}
	if p.Limit > 0 && p.Window > 0 {
		if err := ln.polls.add(ref.Number, p.Limit, p.Window.Milliseconds(), nowMS); err != nil {
			return queue.Ticket{}, err
		}
	}
	if ref.Generation != ln.gen {
		return queue.Ticket{}, queue.ErrTicketNotFound
	}
	return ln.status(ref.Event, ref.Number, nowMS, func(n int64) { s.ended(ref.Event, ln.gen, n, nowMS) })
}

// Leave implements queue.Store.
func (s *Store) Leave(_ context.Context, ref queue.TicketRef) error {
	ln, err := s.get(ref.Event)
	if err != nil {
		return err
	}
	nowMS := s.now().UnixMilli()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	n := ref.Number
	if ref.Generation != ln.gen || n < 1 || n > ln.seq || ln.mark(n) == markLeft {
		return queue.ErrTicketNotFound
	}
	ln.settle(nowMS)
	p := ln.place(n)
	switch {
	case p == 0 || p > ln.serving: // waiting: its place (its number while the draw is pending)
		if p == 0 {
			p = n
		}
		i := sort.Search(len(ln.left), func(i int) bool { return ln.left[i] >= p })
		ln.left = append(ln.left, 0)
		copy(ln.left[i+1:], ln.left[i:])
		ln.left[i] = p
		ln.leftWaiting++
	case ln.active[n] != 0:
		ln.deactivate(n)
		s.ended(ref.Event, ln.gen, n, nowMS)
	default:
		if b := ln.batchOf(p); b != nil && b.Deadline > nowMS && ln.mark(n) == markLive {
			ln.release(b)
		}
		s.ended(ref.Event, ln.gen, n, nowMS)
	}
	ln.setMark(n, markLeft)
	return nil
}

// ended tells the sale that ticket n's session is over (see sessionEnded).
func (s *Store) ended(event string, gen uint32, n, nowMS int64) {
	if s.sessionEnded != nil {
		s.sessionEnded(event, gen, n, nowMS)
	}
}

// Admit implements queue.Store.
//
// With Config.Numbers, a step that would pass the serving ceiling raises it in SQL first (to
// its target and what the next step may admit, line.ahead), outside the line's lock, and steps
// again, then up to the ceiling it finds (durable.go). Each step also raises the ceiling for
// the next one in the background, so that a step rarely waits for SQL.
func (s *Store) Admit(ctx context.Context, event string, maxBatch int64) (queue.AdmitResult, error) {
	var expired int64 // sessions ended by the step that needed a ceiling
	exact := s.numbers != nil
	for {
		res, err := s.admit(event, maxBatch, exact)
		res.Expired += expired
		if nd, ok := err.(needDrawErr); ok {
			if err := s.saveDraw(ctx, event, nd); err != nil {
				return queue.AdmitResult{}, fmt.Errorf("memstore: admit: %w", err)
			}
			continue
		}
		if nc, ok := err.(needCeilingErr); ok {
			expired = res.Expired
			if err := s.raise(ctx, event, nc.seq, nc.serving); err != nil {
				return queue.AdmitResult{}, fmt.Errorf("memstore: admit: reserve the serving ceiling: %w", err)
			}
			exact = false
			continue
		}
		return res, err
	}
}

// ahead is the serving ceiling the next admission step may need once serving is at t, k
// admitted now of free slots: the slots left free, within a tenth of a second of admit_rate
// (the bucket), and no further than the last number. After a loss, those up to it that were
// not admitted yet are admitted at once: early, but within max_active.
func (ln *line) ahead(t, k, free int64) int64 {
	a := max(0, free-k)
	if ln.cfg.AdmitRate > 0 {
		a = min(a, int64(bucketSize(ln.cfg.AdmitRate)))
	}
	return max(t, min(t+a, ln.seq))
}

func (s *Store) admit(event string, maxBatch int64, exact bool) (queue.AdmitResult, error) {
	ln, err := s.get(event)
	if err != nil {
		return queue.AdmitResult{}, err
	}
	nowMS := s.now().UnixMilli()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	res := queue.AdmitResult{Now: queue.FromMS(nowMS)}
	ln.settle(nowMS)
	if err := ln.unsavedDraw(s.numbers != nil); err != nil {
		return res, err
	}
	res.Expired = ln.sweep(nowMS, func(n int64) { s.ended(event, ln.gen, n, nowMS) })
	ln.forgetChallenges(nowMS) // so that they go after a rush of joins, too
	ln.rollRate(nowMS)
	next := ln.serving // the serving ceiling the next step may need (line.ahead)
	defer func() { s.topUp(event, ln.seq, ln.sc, ln.vc, next) }()
	// demand is everyone the step could admit but for admit_rate, the batch cap and the serving
	// ceiling (0 while the line is shut).
	var demand int64
	if ln.cfg.AdmitRate > 0 {
		ln.refill(nowMS, true)
		defer func() { ln.stepTokens(res.Admitted, res.Admitted >= demand) }()
	}
	if ln.soldOut || !ln.open(nowMS) || ln.closed(nowMS) {
		return res, nil
	}
	if ln.ph > 0 {
		// The rest of a pending range after a loss comes first, alone in this step, at once:
		// it was admitted before the loss (durable.go).
		got, from, to := ln.admitPending(nowMS)
		if got > 0 {
			res.Admitted, res.From, res.To = got, from, to
		}
		return res, nil
	}
	if len(ln.passedQ) > 0 {
		ln.admitPassed(nowMS, maxBatch, func(n int64) { s.ended(event, ln.gen, n, nowMS) })
	}
	free := ln.freeSlots()
	k := min(free, ln.waiting()-int64(len(ln.passedQ)))
	demand = k
	if ln.sc > 0 && !exact {
		k = min(k, ln.vc-ln.serving)
	}
	if maxBatch > 0 {
		k = min(k, maxBatch)
	}
	if ln.cfg.AdmitRate > 0 {
		k = min(k, int64(ln.tokens+ln.owed+1e-9)) // a sum of fractions may fall a hair short of 1
	}
	if k <= 0 {
		next = ln.ahead(ln.serving, 0, free)
		return res, nil
	}
	from := ln.serving + 1
	target := ln.serving + k
	i := 0
	for i < len(ln.left) && ln.left[i] <= target {
		target++
		i++
	}
	if ln.sc > 0 && target > ln.vc && exact {
		// The serving ceiling must cover the target before anybody up to it is admitted.
		return res, needCeilingErr{needCeiling{seq: ln.seq, serving: ln.ahead(target, k, free)}}
	}
	if ln.sc > 0 && target > ln.vc {
		// Skipping those who left went past the ceiling: stop at it.
		target = ln.vc
		i = sort.Search(len(ln.left), func(i int) bool { return ln.left[i] > target })
		k = (target - ln.serving) - int64(i)
	}
	ln.left = ln.left[i:]
	next = ln.ahead(target, max(0, k), free)
	if k <= 0 {
		ln.serving = target
		return res, nil
	}
	ln.serving = target
	ln.batches = append(ln.batches, batch{Lo: from, Hi: target, Deadline: nowMS + ln.cfg.ClaimTTL.Milliseconds(), Unclaimed: k, Admitted: nowMS})
	ln.unclaimed += k
	ln.paceCount(k)
	res.Admitted, res.From, res.To = k, from, target
	return res, nil
}

// SetSoldOut implements queue.Store.
func (s *Store) SetSoldOut(_ context.Context, event string, soldOut bool) (int64, error) {
	ln, err := s.get(event)
	if err != nil {
		return 0, err
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !soldOut {
		ln.soldOut = false
		return 0, nil
	}
	return sellOut(ln), nil
}

// Complete implements queue.Store.
func (s *Store) Complete(_ context.Context, ref queue.TicketRef) error {
	ln, err := s.get(ref.Event)
	if err != nil {
		return err
	}
	nowMS := s.now().UnixMilli()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	n := ref.Number
	if ref.Generation != ln.gen || n < 1 || n > ln.seq {
		return queue.ErrTicketNotFound
	}
	switch ln.mark(n) {
	case markCompleted:
		return nil
	case markLeft:
		return queue.ErrTicketNotFound
	case markEnded:
		return queue.ErrNotAdmitted
	}
	ln.settle(nowMS)
	p := ln.place(n)
	if p == 0 || p > ln.serving {
		return queue.ErrNotAdmitted
	}
	if exp, ok := ln.active[n]; ok {
		ln.deactivate(n)
		if exp <= nowMS {
			ln.setMark(n, markEnded)
			return queue.ErrNotAdmitted
		}
	} else if b := ln.batchOf(p); b != nil && b.Deadline > nowMS {
		ln.release(b)
	} else {
		return queue.ErrNotAdmitted
	}
	ln.setMark(n, markCompleted)
	return nil
}

// counted is how many admissions count against max_active: claimed sessions and unclaimed
// admissions, and the pool of a resume (durable.go) within what those leave (lua/common.lua's
// counted_active).
func (ln *line) counted() int64 {
	real := int64(len(ln.active)) + ln.unclaimed
	if ln.poolUnclaimed == 0 {
		return real
	}
	return real + min(ln.poolUnclaimed, max(0, ln.cfg.MaxActive-real))
}

// ---- line rules (caller holds ln.mu) ----

func (ln *line) waiting() int64 { return ln.seq - ln.serving - int64(len(ln.left)) + ln.pending() }

func (ln *line) freeSlots() int64 {
	return ln.cfg.MaxActive - ln.counted()
}

// open reports whether admissions may happen: opened, and not paused by the operator.
func (ln *line) open(nowMS int64) bool {
	return !ln.cfg.Paused && (ln.cfg.OpensAt.IsZero() || nowMS >= ln.cfg.OpensAt.UnixMilli())
}

func (ln *line) closed(nowMS int64) bool {
	return !ln.cfg.ClosesAt.IsZero() && nowMS >= ln.cfg.ClosesAt.UnixMilli()
}

// bucketSize is the admit_rate token bucket's capacity: a tenth of a second's admissions (one
// admission step's worth) and just under one more, so that the fraction of a token a step
// cannot use (always under one) is carried to the next instead of spilling (a bucket of exactly
// floor(rate / 10) admitted 10/s at 15/s: issue 21), while a step still admits at most rate / 10
// when that is whole. While the steps come on time (every queue.AdmitStep), no one-second window
// admits more than 1.1 x admit_rate + 1. redisstore's common.lua bucket_size is the same.
func bucketSize(rate float64) float64 {
	return max(1, rate/10+1-1e-6)
}

// refill adds to the bucket what accrued since its last step, up to bucketSize. With late (a
// step of the admission processor), what overflows it because this step came more than
// queue.AdmitStep after the last one is owed, up to queue.AdmitLateMax of admit_rate: a late
// step makes up what the steps it replaced would have taken. redisstore's common.lua refill
// is the same.
func (ln *line) refill(nowMS int64, late bool) {
	size := bucketSize(ln.cfg.AdmitRate)
	el := nowMS - ln.tokensMS
	if el > 0 {
		ln.tokens += float64(el) * ln.cfg.AdmitRate / 1000
		ln.tokensMS = nowMS
	}
	if ln.tokens > size {
		if step := queue.AdmitStep.Milliseconds(); late && el > step {
			over := min(ln.tokens-size, float64(el-step)*ln.cfg.AdmitRate/1000)
			ln.owed = min(ln.owed+over, queue.AdmitLateMax.Seconds()*ln.cfg.AdmitRate)
		}
		ln.tokens = size
	}
}

// stepTokens takes a step's k admissions from the bucket, then from what is owed; spare (the
// step admitted everyone it could) leaves nothing owed, else the bucket keeps what the next
// step's refill has room for and the rest is owed, up to queue.AdmitLateMax of admit_rate.
// redisstore's common.lua step_tokens is the same.
func (ln *line) stepTokens(k int64, spare bool) {
	ln.tokens -= float64(k)
	if ln.tokens < 0 {
		ln.owed, ln.tokens = ln.owed+ln.tokens, 0
	}
	if spare {
		ln.owed = 0
		return
	}
	rate := ln.cfg.AdmitRate
	if keep := max(0, bucketSize(rate)-rate*queue.AdmitStep.Seconds()); ln.tokens > keep {
		ln.owed, ln.tokens = min(ln.owed+ln.tokens-keep, queue.AdmitLateMax.Seconds()*rate), keep
	}
}

func (ln *line) takeToken(nowMS int64, n float64) bool {
	if ln.cfg.AdmitRate <= 0 {
		return true
	}
	ln.refill(nowMS, false)
	if ln.tokens+1e-9 < n {
		return false
	}
	ln.tokens -= n
	return true
}

// rollRate folds the admissions counted since the window began into the moving average, once
// the window closes (queue.RateEvents).
func (ln *line) rollRate(nowMS int64) {
	el := nowMS - ln.winStart
	if el < 1000 || (ln.winCount < queue.RateEvents && el < queue.RateSpan.Milliseconds() &&
		ln.rate*float64(el) < 2000*queue.RateEvents) {
		return
	}
	r := float64(ln.winCount) * 1000 / float64(el)
	if ln.rate == 0 {
		ln.rate = r
	} else {
		ln.rate = 0.7*ln.rate + 0.3*r
	}
	ln.winStart, ln.winCount = nowMS, 0
}

// paceCount adds k admissions to the line's admitted total, and to the window of the admission
// rate ETAs read (rollRate) but for those among the line's first max_active: they fill an empty
// room, all at once at an opening, and tell nothing of the pace at which people get in once it
// is full (lua/common.lua's pace_count has the rule and its measure).
func (ln *line) paceCount(k int64) {
	before := ln.admittedTotal
	ln.admittedTotal += k
	ln.winCount += max(0, ln.admittedTotal-max(ln.cfg.MaxActive, before))
}

func (ln *line) etaRate() float64 { return ln.rate }

// activate starts or renews the admitted session of n (admitted at admittedMS) for the
// session TTL from now, never past admission + SessionMax (as Extend moved it) and never
// shortening an extension. It reports false when that end has passed: the session is over
// and n is not made active.
func (ln *line) activate(n, nowMS, admittedMS int64) bool {
	exp := nowMS + ln.cfg.SessionTTL.Milliseconds()
	if smax := ln.cfg.SessionMax.Milliseconds(); smax > 0 {
		end, ok := ln.ends[n]
		if !ok {
			end = admittedMS + smax
		}
		if end <= nowMS {
			return false
		}
		if ln.ends == nil {
			ln.ends = make(map[int64]int64)
		}
		ln.ends[n] = end
		exp = min(exp, end)
	}
	cur, ok := ln.active[n]
	if !ok {
		ln.expiries.push(exp, n)
	}
	ln.active[n] = max(exp, cur)
	return true
}

// deactivate forgets n's admitted session.
func (ln *line) deactivate(n int64) {
	delete(ln.active, n)
	delete(ln.ends, n)
}

// admittedAt is when batch b was admitted (unix ms).
func (ln *line) admittedAt(b *batch) int64 {
	if b.Admitted > 0 {
		return b.Admitted
	}
	return b.Deadline - ln.cfg.ClaimTTL.Milliseconds()
}

func (ln *line) ticket(event string, n, nowMS int64) queue.Ticket {
	return queue.Ticket{
		TicketRef: queue.TicketRef{Event: event, Generation: ln.gen, Number: n},
		Waiting:   ln.waiting(), Serving: ln.serving, Rate: ln.etaRate(), Now: queue.FromMS(nowMS),
	}
}

// status reads ticket n and counts as its activity.
// status reads ticket n (activity of an admitted session); ended, if not nil, is called when
// this read ends the session.
func (ln *line) status(event string, n, nowMS int64, ended func(n int64)) (queue.Ticket, error) {
	if n < 1 || n > ln.seq {
		return queue.Ticket{}, queue.ErrTicketNotFound
	}
	t := ln.ticket(event, n, nowMS)
	p := ln.place(n)
	t.Place = p
	switch ln.mark(n) {
	case markLeft:
		return queue.Ticket{}, queue.ErrTicketNotFound
	case markEnded:
		t.Status = queue.StatusExpired
		return t, nil
	case markCompleted:
		t.Status = queue.StatusCompleted
		return t, nil
	}
	if ln.isVoid(n) {
		// A void number whose holder shows up (durable.go): it keeps its number (and place).
		placed := p > 0 && p <= ln.serving
		if placed && !(ln.ph > 0 && p >= ln.pl && p <= ln.ph) && !ln.open(nowMS) {
			t.Status, t.Position = queue.StatusQueued, 1
			return t, nil
		}
		if placed && !(ln.ph > 0 && p >= ln.pl && p <= ln.ph) {
			// Owed its admission: at once if a slot is free and nobody else is owed one first,
			// else at the next steps, ahead of the line (never above max_active).
			if ln.soldOut { // nobody is admitted once sold out (sellOut)
				t.Status = queue.StatusSoldOut
				return t, nil
			}
			i := slices.Index(ln.passedQ, n)
			if (i >= 0 || len(ln.passedQ) > 0 || ln.freeSlots() <= 0) && ln.closed(nowMS) {
				t.Status = queue.StatusClosed
				return t, nil
			}
			if i < 0 && (len(ln.passedQ) > 0 || ln.freeSlots() <= 0) {
				ln.passedQ = append(ln.passedQ, n)
				i = len(ln.passedQ) - 1
			}
			if i >= 0 {
				t.Status, t.Position, t.Waiting = queue.StatusQueued, int64(i+1), ln.waiting()
				return t, nil
			}
		}
		if ln.reclaim(n, p, nowMS) {
			t.Status = queue.StatusAdmitted
			t.AdmittedUntil = queue.FromMS(ln.active[n])
			t.UserKey = ln.userOf[n]
			t.Waiting = ln.waiting()
			return t, nil
		}
		t.Waiting = ln.waiting()
	}
	if p == 0 || p > ln.serving {
		if ln.closed(nowMS) {
			t.Status = queue.StatusClosed
			return t, nil
		}
		t.Status = queue.StatusQueued
		if p > 0 { // else the pre-queue's draw is pending: no position yet
			i := sort.Search(len(ln.left), func(i int) bool { return ln.left[i] >= p })
			t.Position = p - ln.serving - int64(i) + ln.pending()
		}
		return t, nil
	}
	if ln.ph > 0 && p >= ln.pl && p <= ln.ph {
		// In the part of a pending range not admitted yet (past the first 4,096 places: the
		// next admission step admits it).
		if ln.closed(nowMS) {
			t.Status = queue.StatusClosed
			return t, nil
		}
		t.Status = queue.StatusQueued
		t.Position = max(1, min(p-ln.pl+1, ln.pn))
		return t, nil
	}
	if exp, ok := ln.active[n]; ok {
		if exp <= nowMS {
			ln.deactivate(n)
			ln.setMark(n, markEnded)
			if ended != nil {
				ended(n)
			}
			t.Status = queue.StatusExpired
			return t, nil
		}
		ln.activate(n, nowMS, nowMS) // its end is recorded: the admission time is not read
	} else if b := ln.batchOf(p); b != nil && b.Deadline > nowMS {
		admitted := ln.admittedAt(b)
		ln.release(b)
		if !ln.activate(n, nowMS, admitted) {
			ln.setMark(n, markEnded) // the session's absolute end passed before its claim
			t.Status = queue.StatusExpired
			return t, nil
		}
	} else {
		t.Status = queue.StatusExpired
		i := sort.Search(len(ln.soldRanges), func(i int) bool { return ln.soldRanges[i].Hi >= p })
		if i < len(ln.soldRanges) && ln.soldRanges[i].Lo <= p {
			t.Status = queue.StatusSoldOut
		}
		return t, nil
	}
	t.Status = queue.StatusAdmitted
	t.AdmittedUntil = queue.FromMS(ln.active[n])
	t.UserKey = ln.userOf[n]
	return t, nil
}

// batchOf returns the claimable batch holding place n, or nil.
func (ln *line) batchOf(n int64) *batch {
	i := sort.Search(len(ln.batches), func(i int) bool { return ln.batches[i].Hi >= n })
	if i < len(ln.batches) && ln.batches[i].Lo <= n {
		return &ln.batches[i]
	}
	return nil
}

// release takes one unclaimed admission out of batch b, dropping the batch when none is left.
func (ln *line) release(b *batch) {
	b.Unclaimed--
	if b.Lo <= ln.poolTop {
		ln.poolUnclaimed--
	} else {
		ln.unclaimed--
	}
	if b.Unclaimed == 0 {
		i := sort.Search(len(ln.batches), func(i int) bool { return ln.batches[i].Hi >= b.Lo })
		ln.batches = append(ln.batches[:i], ln.batches[i+1:]...)
	}
}

// sweep ends idle sessions and unclaimed batches whose time is up; it returns how many ended.
// ended, if not nil, is called with each idle session it ends.
func (ln *line) sweep(nowMS int64, ended func(n int64)) int64 {
	var count int64
	for e, ok := ln.expiries.popDue(nowMS); ok; e, ok = ln.expiries.popDue(nowMS) {
		n := e.v
		switch exp, ok := ln.active[n]; {
		case !ok: // left
		case exp > nowMS: // extended since it was queued: one heap entry per session
			ln.expiries.push(exp, n)
		default:
			ln.deactivate(n)
			ln.setMark(n, markEnded)
			count++
			if ended != nil {
				ended(n)
			}
		}
	}
	// Claim deadlines rise with the batches (a shorter claim TTL caps the older ones, see
	// PutEvent), so the lapsed batches are a prefix: the sweep stops at the first live one.
	i := 0
	for i < len(ln.batches) && ln.batches[i].Deadline <= nowMS {
		if ln.batches[i].Lo <= ln.poolTop {
			ln.poolUnclaimed -= ln.batches[i].Unclaimed
		} else {
			ln.unclaimed -= ln.batches[i].Unclaimed
		}
		count += ln.batches[i].Unclaimed
		ln.unclaimedTotal += ln.batches[i].Unclaimed
		i++
	}
	ln.batches = ln.batches[i:]
	return count
}

func (ln *line) mark(n int64) byte {
	i := n >> 2
	if i >= int64(len(ln.marks)) {
		return markLive
	}
	return (ln.marks[i] >> ((n & 3) * 2)) & 3
}

func (ln *line) setMark(n int64, m byte) {
	i := n >> 2
	for i >= int64(len(ln.marks)) {
		ln.marks = append(ln.marks, make([]byte, max(64, len(ln.marks)))...)
	}
	sh := (n & 3) * 2
	ln.marks[i] = ln.marks[i]&^(3<<sh) | m<<sh
}

// Extend implements queue.Store.
func (s *Store) Extend(_ context.Context, event string, d time.Duration) (int64, error) {
	ln, err := s.get(event)
	if err != nil {
		return 0, err
	}
	nowMS := s.now().UnixMilli()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	var n int64
	for num, exp := range ln.active {
		if exp > nowMS {
			ln.active[num] = exp + d.Milliseconds() // the heap entry re-queues itself (sweep)
			if end, ok := ln.ends[num]; ok {
				ln.ends[num] = end + d.Milliseconds() // session_max moves with it
			}
			n++
		}
	}
	for i := range ln.batches {
		if b := &ln.batches[i]; b.Deadline > nowMS {
			b.Deadline += d.Milliseconds()
			n += b.Unclaimed
		}
	}
	return n, nil
}

// NewBackend returns the embedded deployment's backend: a line store, the sale and the coupon
// campaigns on it, and an in-process notifier. The line is kept by the returned *Store too,
// for Snapshot and Restore.
func NewBackend(cfg Config) (store.Backend, *Store) {
	lines := New(cfg)
	counts := NewCounts(cfg)
	return store.Backend{
		Line: lines, Sale: NewSales(lines), Coupons: NewCoupons(cfg), Notifier: NewNotifier(), Leases: NewLeases(cfg),
		History:  NewHistory(cfg),
		Counters: counts, Shares: counts, Auto: lines,
	}, lines
}

// Leases is the store.Leases of one process.
type Leases struct {
	now  func() time.Time
	mu   sync.Mutex
	held map[string]lease
}

type lease struct {
	holder string
	until  time.Time
}

// NewLeases returns Leases on cfg's clock.
func NewLeases(cfg Config) *Leases {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Leases{now: cfg.Now, held: map[string]lease{}}
}

// Lease implements store.Leases.
func (l *Leases) Lease(_ context.Context, name, holder string, ttl time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if cur, ok := l.held[name]; ok && cur.holder != holder && now.Before(cur.until) {
		return false, nil
	}
	l.held[name] = lease{holder: holder, until: now.Add(ttl)}
	return true, nil
}

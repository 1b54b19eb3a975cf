package memstore

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// Durable numbers (docs/durability.md), as the Redis store keeps them (redisstore/durable.go
// and lua/resume.lua, lua/pending.lua): with Config.Numbers, a line hands out numbers and
// moves serving only below ceilings reserved in SQL, and a line made again after the process
// stopped without a snapshot (a crash) resumes above them under its old generation. The
// embedded store cannot roll back while it runs, so only the "line is gone" case arises.

// ceilingTimeout bounds a reservation made in the background.
const ceilingTimeout = 5 * time.Second

// needCeiling is a join's answer when its number would pass a ceiling: the ceilings must
// reach at least seq+1 and serving. atOnce: only to admit the join at once (join.lua's
// ARGV[12]: the join asks that once, then waits in line instead).
type needCeiling struct {
	seq, serving int64
	atOnce       bool
}

// resume moves a new line's counters past what was lost (see lua/resume.lua for the rules).
// Caller holds ln.mu.
//
// A line whose opening drew its pre-queue (rec.DrawN, with the seed of its configuration)
// resumes opened, with that draw: tickets 1..DrawN keep their drawn places. They were all handed
// out but the draw's void numbers (rec.DrawVoid: a loss before the opening),
// which are void again; the serving counter, its checkpoint and the pending range are places,
// as before the loss.
func (ln *line) resume(rec, next queue.LineRecord, nowMS int64) {
	var dv []int64 // the draw's void numbers, then the owed queue's
	if rec.DrawN > 0 && len(ln.cfg.DrawSeed) > 0 {
		if d, err := draw.New(ln.cfg.DrawSeed, rec.DrawN); err == nil {
			ln.opened, ln.drawPending, ln.drawSaved = true, false, true
			ln.drawSeed, ln.drawN, ln.dr = ln.cfg.DrawSeed, rec.DrawN, d
			dv = slices.Clone(rec.DrawVoid)
		}
	}
	seq, known := rec.SeqCeiling, min(max(rec.SeqMark, ln.drawN), rec.SeqCeiling)
	srv := min(rec.ServingCeiling, seq)
	base := min(rec.ServingMark, srv)
	// Every number up to the serving ceiling was handed out: a step never reserves serving past
	// the last number. Only numbers above it can be void (and the draw's void numbers, at
	// places of their own).
	known = max(known, srv)
	ln.seq, ln.serving = seq, srv
	ln.sc, ln.vc = max(next.SeqCeiling, seq), max(next.ServingCeiling, srv)
	// The owed queue at the last checkpoint: void again, so that their holders are owed their
	// admission again when they show up (their places were passed).
	for _, n := range rec.Owed {
		if n >= 1 && n <= seq && !slices.Contains(dv, n) {
			dv = append(dv, n)
		}
	}
	slices.Sort(dv)
	nv := max(0, seq-known) + int64(len(dv))
	if nv > 0 {
		ln.void = make(map[int64]struct{}, nv)
		ln.voidLo, ln.voidHi = known+1, seq
		if len(dv) > 0 {
			ln.voidLo, ln.voidHi = min(ln.voidLo, dv[0]), max(ln.voidHi, dv[len(dv)-1])
		}
	}
	var passed int64 // void places of the pending range
	for _, n := range dv {
		if n < 1 || n > known {
			continue // past the checkpoint: void below with the rest
		}
		ln.void[n] = struct{}{}
		// Not a switch: go1.26.8 with -race compiled `switch p := ...; { case p > srv: ...
		// case p > base: passed++ }` here without its second case (seen in go tool objdump).
		p := ln.numberPlace(n)
		if p > srv {
			ln.left = append(ln.left, p)
		} else if p > base {
			passed++ // skipped by admitPending; passed over by serving, it is owed at once (reclaim)
		}
	}
	for n := known + 1; n <= seq; n++ {
		ln.void[n] = struct{}{}
		ln.left = append(ln.left, n)
	}
	slices.Sort(ln.left)
	if srv > base {
		ln.pl, ln.ph = base+1, srv
		ln.pn = srv - base - passed
	}
	ln.poolTop = srv
	ln.admitPending(nowMS)
}

// numberPlace is ticket n's place once the line's draw, if any, is settled: its drawn place
// among the draw's N, else its number.
func (ln *line) numberPlace(n int64) int64 {
	if ln.dr != nil && n >= 1 && n <= ln.drawN {
		return ln.dr.Place(n)
	}
	return n
}

// pending is how many of the pending range, and of the holders of passed void numbers
// (passedQ), still wait: they are ahead of everyone above serving.
func (ln *line) pending() int64 {
	n := int64(len(ln.passedQ))
	if ln.ph > 0 {
		n += ln.pn
	}
	return n
}

// admitPassed admits the holders of passed void numbers who wait for a slot (passedQ), first
// come first, within the free slots, maxBatch (0: no cap) and admit_rate's tokens: each gets a
// session, as reclaim gives one when a slot is free (its holder showed up a moment ago). A
// ticket that left or ended meanwhile is dropped. Caller holds ln.mu, the line open.
func (ln *line) admitPassed(nowMS, maxBatch int64, ended func(n int64)) {
	m := min(ln.freeSlots(), int64(len(ln.passedQ)))
	if maxBatch > 0 {
		m = min(m, maxBatch)
	}
	if ln.cfg.AdmitRate > 0 {
		m = min(m, int64(ln.tokens+ln.owed+1e-9))
	}
	var got, i int64
	for ; i < int64(len(ln.passedQ)) && got < m; i++ {
		n := ln.passedQ[i]
		if ln.mark(n) != markLive || !ln.isVoid(n) {
			continue
		}
		delete(ln.void, n)
		if ln.activate(n, nowMS, nowMS) {
			got++
		} else {
			ln.setMark(n, markEnded) // its session's absolute end passed meanwhile
			if ended != nil {
				ended(n)
			}
		}
	}
	ln.passedQ = ln.passedQ[i:]
	if ln.cfg.AdmitRate > 0 {
		ln.tokens -= float64(got)
	}
	ln.paceCount(got)
}

// isVoid reports whether n is a void number not yet reclaimed.
func (ln *line) isVoid(n int64) bool {
	_, ok := ln.void[n]
	return ok
}

// numberAt is the number of the ticket at place p (the inverse of place, after the opening).
func (ln *line) numberAt(p int64) int64 {
	if ln.dr != nil && p >= 1 && p <= ln.drawN {
		return ln.dr.Number(p)
	}
	return p
}

// admitPending admits the pending range (places) at once, 4,096 places a call, as claimable
// batches of the pool (lua/pending.lua): every ticket of it may have been told it was admitted
// before the loss. Void numbers are skipped (a holder who shows up later is admitted at once,
// reclaim). It returns how many, and the batch's first and last places.
func (ln *line) admitPending(nowMS int64) (got, from, to int64) {
	if ln.ph <= 0 {
		return 0, 0, 0
	}
	from = ln.pl
	n := ln.pl
	for n <= ln.ph && n-from < 4096 {
		if num := ln.numberAt(n); !ln.isVoid(num) && ln.mark(num) == markLive {
			got++
		}
		n++
	}
	if got > 0 {
		ln.batches = append(ln.batches, batch{Lo: from, Hi: n - 1, Deadline: nowMS + ln.cfg.ClaimTTL.Milliseconds(), Unclaimed: got, Admitted: nowMS})
		sort.Slice(ln.batches, func(i, j int) bool { return ln.batches[i].Lo < ln.batches[j].Lo })
		ln.poolUnclaimed += got // its Lo is at or below poolTop (resume)
		ln.paceCount(got)
	}
	ln.pl, ln.pn = n, max(0, ln.pn-got)
	if n > ln.ph {
		ln.pl, ln.ph, ln.pn = 0, 0, 0
	}
	return got, from, n - 1
}

// reclaim handles a void number whose holder shows up (lua/common.lua's ticket_status): it
// returns true with the ticket admitted when serving passed it (owed the admission at once).
// Caller holds ln.mu.
func (ln *line) reclaim(n, p, nowMS int64) (admitted bool) {
	delete(ln.void, n)
	switch {
	case p == 0 || p > ln.serving: // left holds its place (its number while a draw is pending)
		if p == 0 {
			p = n
		}
		i := sort.Search(len(ln.left), func(i int) bool { return ln.left[i] >= p })
		if i < len(ln.left) && ln.left[i] == p {
			ln.left = append(ln.left[:i], ln.left[i+1:]...)
		}
		return false
	case ln.ph > 0 && p >= ln.pl && p <= ln.ph:
		ln.pn++
		if ln.open(nowMS) {
			ln.admitPending(nowMS) // with the rest of the range
		}
		return false
	default:
		ln.admittedTotal++
		return ln.activate(n, nowMS, nowMS)
	}
}

// needDrawErr is the answer of a step that would tell a drawn position or admit before the
// line's draw is recorded with its durable numbers: record N and the void numbers it permuted
// (saveDraw, queue.Numbers.Draw) and call again.
type needDrawErr struct {
	n    int64
	void []int64 // the numbers still void, ascending
}

func (needDrawErr) Error() string { return "memstore: the line's draw is not durable yet" }

// unsavedDraw returns needDrawErr when the line's opening drew its pre-queue and the draw is not
// recorded yet (durable: Config.Numbers is set). Caller holds ln.mu, after settle.
func (ln *line) unsavedDraw(durable bool) error {
	if durable && ln.dr != nil && !ln.drawSaved {
		nd := needDrawErr{n: ln.drawN}
		for n := range ln.void {
			if n <= ln.drawN {
				nd.void = append(nd.void, n)
			}
		}
		slices.Sort(nd.void)
		return nd
	}
	return nil
}

// saveDraw records the draw of nd.n tickets of event's line with its durable numbers
// (queue.Numbers.Draw), so that a line resumed after a crash keeps it (resume). Errors: the
// database's.
func (s *Store) saveDraw(ctx context.Context, event string, nd needDrawErr) error {
	if err := s.numbers.Draw(ctx, event, nd.n, nd.void); err != nil {
		return err
	}
	ln, err := s.get(event)
	if err != nil {
		return nil // gone: the call says so
	}
	ln.mu.Lock()
	if ln.drawN == nd.n {
		ln.drawSaved = true
	}
	ln.mu.Unlock()
	return nil
}

// raise reserves the next block above seq (as far ahead as the line's pace asks, queue.Pace)
// and the serving ceiling up to exactly serving, and raises the line's ceilings.
func (s *Store) raise(ctx context.Context, event string, seq, serving int64) error {
	next, err := s.numbers.Reserve(ctx, event, seq+s.pace.Ahead(event), serving)
	if err != nil {
		return err
	}
	ln, err := s.get(event)
	if err != nil {
		return err
	}
	ln.mu.Lock()
	ln.sc, ln.vc = max(ln.sc, next.SeqCeiling), max(ln.vc, next.ServingCeiling)
	ln.mu.Unlock()
	return nil
}

// topUp raises the seq ceiling sc in the background when it is less than half its reservation
// ahead of the last number seq (the admission step's figures also measure the line's pace:
// queue.Pace), and the serving ceiling vc to next (line.ahead) when that is above it.
func (s *Store) topUp(event string, seq, sc, vc, next int64) {
	if s.numbers == nil || sc == 0 {
		return
	}
	if sc-seq >= s.pace.Observe(event, seq, s.now())/2 && next <= vc {
		return
	}
	// One at a time per event, the latest figures run after the one that runs (queue.TopUps);
	// a failure is dropped: the next step tries again, a join reserves itself.
	s.topUps.Go(event, seq, next, ceilingTimeout,
		func(ctx context.Context, seq, next int64) error { return s.raise(ctx, event, seq, next) }, nil)
}

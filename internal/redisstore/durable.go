package redisstore

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// Durable numbers (docs/durability.md). With Config.Numbers set, a line hands out ticket
// numbers and moves its serving counter only below ceilings reserved in SQL (a hi-lo
// allocator), and a line that Redis lost — or rolled back — resumes above them:
//
//   - a line that is gone (EVENT_NOT_FOUND) is made again by PutEvent from the SQL record
//     (resume.lua), under its old generation, so old ticket ids keep their meaning;
//   - a line that Redis still has but may have rolled back (a restart from an older snapshot,
//     a failover to a lagging replica) is resumed by recover.lua when this instance has dialed
//     Redis since it last checked the line (Config.Dials counts the dials): the line records
//     the run_id of the server it was resumed on, so only a line on a new server is touched;
//   - a script that reaches a ceiling answers NEED_CEILING and the caller reserves and
//     retries; the admission processor tops the seq ceiling up ahead of need (Admit), so joins
//     almost never wait for SQL. The serving ceiling is raised before an admission step
//     admits, to its target and what the next step may admit (admit.lua), in the background
//     after each step, so that a step rarely waits for SQL; after a loss everybody at or below
//     it may have been told and is admitted at once (pending.lua).

// maxCeilingRetries bounds a join's reserve-and-retry rounds (each reserves a whole block, or
// waits for this instance's reservation, so another round means others used it meanwhile).
const maxCeilingRetries = 8

// ceilingTimeout bounds a reservation made in the background.
const ceilingTimeout = 5 * time.Second

// durable is the Store's state for durable numbers (zero value: none).
type durable struct {
	numbers  queue.Numbers
	dials    *atomic.Uint64
	onResume func(event string) // Config.OnResume
	// checked: event id -> the dial count when the line was last found on its server.
	checked sync.Map
	// campaigns: the same for coupon campaigns (couponGuard).
	campaigns sync.Map
	// topUps runs the background reservations, one at a time per event.
	topUps queue.TopUps
	// raising: one reservation per event at a time: the calls that need one meanwhile wait
	// for it instead of each writing to SQL (a herd of joins at a ceiling).
	raising singleflight.Group
	// pace: how far ahead the ceilings are reserved (queue.Pace).
	pace queue.Pace
}

// raiseShared is raise, once at a time per event per instance: a call that finds one running
// waits for it (and its caller retries the script, which may need another).
func (s *Store) raiseShared(ctx context.Context, event string, seq, serving int64) error {
	return shared(ctx, &s.dur.raising, event, func(ctx context.Context) error { return s.raise(ctx, event, seq, serving) })
}

// shared runs fn once at a time per key: a call that finds one running waits for it (within
// its own ctx) and returns its error. fn runs on a context of its own, not cancelled with the
// caller's (the others wait on it), bounded by ceilingTimeout.
func shared(ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) error) error {
	ch := g.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ceilingTimeout)
		defer cancel()
		return nil, fn(fctx)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dialCounter returns a rueidis dial function that counts successful dials in n: every new
// connection may reach a restarted or failed-over server, whose lines must be checked before
// use.
func dialCounter(n *atomic.Uint64) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		var c net.Conn
		var err error
		if cfg != nil {
			td := tls.Dialer{NetDialer: d, Config: cfg}
			c, err = td.DialContext(ctx, "tcp", dst)
		} else {
			c, err = d.DialContext(ctx, "tcp", dst)
		}
		if err == nil {
			n.Add(1)
		}
		return c, err
	}
}

// guard makes sure event's line is on the server it was resumed on before a script uses its
// numbers: once per event per dial of this instance (one sync.Map read otherwise).
func (s *Store) guard(ctx context.Context, event string) error {
	if s.dur.numbers == nil {
		return nil
	}
	var dials uint64
	if s.dur.dials != nil {
		dials = s.dur.dials.Load()
	}
	if v, ok := s.dur.checked.Load(event); ok && v.(uint64) == dials {
		return nil
	}
	err := s.recoverLine(ctx, event)
	if errors.Is(err, queue.ErrEventNotFound) {
		return nil // the caller's script says so too, and the line is made again (PutEvent)
	}
	if err != nil {
		return err
	}
	s.dur.checked.Store(event, dials)
	return nil
}

// recoverLine resumes event's line if it is on another server than the one it was last
// resumed on (recover.lua). Errors: queue.ErrEventNotFound, SQL's or Redis's.
func (s *Store) recoverLine(ctx context.Context, event string) error {
	r := readReply(recoverScript.Exec(ctx, s.client, s.lineKeys(event), []string{s.nowArg(), "1"}).ToArray())
	code := r.Code()
	var seq, srv int64
	if code == 1 {
		seq, srv = r.Int(1), r.Int(2)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: recover: %w", err)
	}
	if code <= 0 {
		return codeErr(event, code)
	}
	rec, err := s.dur.numbers.Line(ctx, event)
	if err != nil {
		return err
	}
	// The serving ceiling stays: an admission step raises it to exactly what it admits.
	next, err := s.dur.numbers.Reserve(ctx, event, max(rec.SeqCeiling, seq)+queue.SeqBlock, max(rec.ServingCeiling, srv))
	if err != nil {
		return err
	}
	// The draw's N tickets were all handed out but its void numbers (a loss before the opening).
	var seed []byte
	if rec.DrawN > 0 && len(rec.DrawVoid)+len(rec.Owed) > 0 {
		h, err := s.client.Do(ctx, s.client.B().Hget().Key(s.lineKeys(event)[0]).Field("seed").Build()).ToString()
		if err == nil {
			seed, err = hex.DecodeString(h)
		}
		if err != nil && !rueidis.IsRedisNil(err) {
			return fmt.Errorf("redisstore: recover: the draw's seed: %w", err)
		}
	}
	args := append([]string{s.nowArg(), "0", itoa(rec.SeqCeiling), itoa(rec.ServingCeiling), itoa(max(rec.SeqMark, rec.DrawN)),
		itoa(next.SeqCeiling), itoa(next.ServingCeiling), itoa(rec.DrawN)}, drawVoidArgs(rec, seed)...)
	r = readReply(recoverScript.Exec(ctx, s.client, s.lineKeys(event), args).ToArray())
	if r.Code() == codeDrawLeft && r.Err() == nil {
		// An older copy of a drawn line: its tickets that left before the opening are scored by
		// place first (they count in the resume's pending range by place), then it is resumed.
		ld, err := s.learnDraw(event, r)
		if err == nil {
			err = s.scoreLeft(ctx, event, ld)
		}
		if err != nil {
			return fmt.Errorf("redisstore: recover: %w", err)
		}
		r = readReply(recoverScript.Exec(ctx, s.client, s.lineKeys(event), args).ToArray())
	}
	code = r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: recover: %w", err)
	}
	if code < 0 {
		return codeErr(event, code)
	}
	if code == 2 {
		s.resumed(event, "the line is an older copy, or on another server", max(rec.SeqCeiling, seq), max(rec.ServingCeiling, srv), r.Int(1))
	}
	return nil
}

// resumed tells that event's line was resumed after a Redis loss (why): a warning, and
// Config.OnResume. seq and serving are the figures it resumed above, void the numbers it
// holds void until their holders show up.
func (s *Store) resumed(event, why string, seq, serving, void int64) {
	s.logger.Warn("line resumed after a Redis loss: numbers continue above the durable ceiling; admitted sessions of the lost copy may have ended",
		"event", event, "why", why, "seq", seq, "serving", serving, "void", void)
	if s.dur.onResume != nil {
		s.dur.onResume(event)
	}
}

// createArgs returns put_event.lua's extra arguments for a new line: its generation and the
// figures it resumes from (resume.lua), with the draw its opening made if any (seed: the
// event's), after reserving the first blocks above them; the draw's void numbers (dv, see
// drawVoidArgs); and the record it read (a SeqCeiling above 0: the line had numbers before,
// and Redis lost it).
func (s *Store) createArgs(ctx context.Context, event string, seed []byte) (gen uint32, extra, dv []string, rec queue.LineRecord, err error) {
	rec, err = s.dur.numbers.Line(ctx, event)
	if err != nil {
		return 0, nil, nil, rec, err
	}
	// The serving ceiling stays: an admission step raises it to exactly what it admits.
	next, err := s.dur.numbers.Reserve(ctx, event, rec.SeqCeiling+queue.SeqBlock, rec.ServingCeiling)
	if err != nil {
		return 0, nil, nil, rec, err
	}
	srv := min(rec.ServingCeiling, rec.SeqCeiling)
	// The draw's N tickets were all handed out but its void numbers (a loss before the opening).
	return rec.Generation, []string{itoa(rec.SeqCeiling), itoa(max(rec.SeqMark, rec.DrawN)), itoa(srv), itoa(min(rec.ServingMark, srv)),
		itoa(next.SeqCeiling), itoa(next.ServingCeiling), itoa(rec.DrawN)}, drawVoidArgs(rec, seed), rec, nil
}

// drawVoidArgs returns resume.lua's arguments for the numbers a resume makes void besides
// those past the checkpoint: rec's draw's void numbers (queue.LineRecord.DrawVoid) and its owed
// queue at the checkpoint (Owed), each number, then its place (Lua has no AES to compute a
// drawn place: the draw of N = rec.DrawN with seed; past the draw, or with no draw to be made,
// the number). None when there are none.
func drawVoidArgs(rec queue.LineRecord, seed []byte) []string {
	nums := slices.Concat(rec.DrawVoid, rec.Owed)
	if len(nums) == 0 {
		return nil
	}
	slices.Sort(nums)
	nums = slices.Compact(nums)
	var d *draw.Draw
	if rec.DrawN > 0 {
		d, _ = draw.New(seed, rec.DrawN) // nil when none can be made (restore_draw makes none)
	}
	args := make([]string, 0, 2*len(nums))
	for _, n := range nums {
		switch {
		case n < 1:
		case n <= rec.DrawN && d != nil:
			args = append(args, itoa(n), itoa(d.Place(n)))
		case n > rec.DrawN:
			args = append(args, itoa(n), itoa(n))
		}
	}
	return args
}

// raise reserves the next block above seq in SQL (as far ahead as the line's pace asks,
// queue.Pace) and the serving ceiling up to exactly serving, and raises the line's ceilings
// to them (raise.lua), resuming the line first if it moved to another server.
func (s *Store) raise(ctx context.Context, event string, seq, serving int64) error {
	next, err := s.dur.numbers.Reserve(ctx, event, seq+s.dur.pace.Ahead(event), serving)
	if err != nil {
		return err
	}
	r := readReply(raiseScript.Exec(ctx, s.client, s.lineKeys(event), []string{itoa(next.SeqCeiling), itoa(next.ServingCeiling)}).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: raise: %w", err)
	}
	if code == 1 {
		s.dur.checked.Delete(event)
		return s.recoverLine(ctx, event)
	}
	return codeErr(event, code)
}

// topUp raises the seq ceiling sc in the background when it is less than half its reservation
// ahead of the last number seq, and the serving ceiling vc to ahead (admit.lua: what the next
// step may admit up to) when that is above it. The admission processor calls it with every
// step's figures, which also measure the line's pace (queue.Pace). One at a time per event per
// instance: one asked for while another runs is run after it, with the latest figures.
func (s *Store) topUp(event string, seq, sc, vc, ahead int64) {
	if s.dur.numbers == nil || sc == 0 {
		return
	}
	if sc-seq >= s.dur.pace.Observe(event, seq, time.Now())/2 && ahead <= vc {
		return
	}
	s.dur.topUps.Go(event, seq, ahead, ceilingTimeout,
		func(ctx context.Context, seq, ahead int64) error { return s.raise(ctx, event, seq, ahead) },
		func(err error) {
			if !errors.Is(err, queue.ErrEventNotFound) {
				s.logger.Warn("could not reserve line numbers ahead", "event", event, "err", err)
			}
		})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

package redisstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/rueidis"
	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// The scripts work in places (see lua/common.lua); a ticket of a drawn pre-queue has its place
// from the draw's keyed permutation, which needs AES, not at hand in Redis's Lua. So the Go side
// computes it, from the seed and N the line holds once its opening is settled, and passes it
// with the N it was computed for; a script that finds another N answers DRAW_MOVED with the
// line's, and the call is made again. Each instance learns each line's draw once.

// drawAttempts bounds the calls of one operation that get DRAW_MOVED or NEED_PLACE: the draw
// of a line is made once, so the second call has the right N unless the line was re-created
// in between.
const drawAttempts = 3

// lineDraw is the draw of one generation of an event's line: N tickets (0: none) and their
// permutation (nil when N is 0).
type lineDraw struct {
	gen uint32
	n   int64
	d   *draw.Draw
}

// drawCache holds the draws of the lines, by event id; bounded by maxCachedEvents (beyond it a
// draw is rebuilt per call: correct, slower).
type drawCache struct {
	m     sync.Map // event id -> *lineDraw
	count sync.Mutex
	size  int
	// scoring: one scoreLeft per event at a time.
	scoring singleflight.Group
}

func (c *drawCache) get(event string) *lineDraw {
	if v, ok := c.m.Load(event); ok {
		return v.(*lineDraw)
	}
	return nil
}

func (c *drawCache) put(event string, ld *lineDraw) {
	c.count.Lock()
	defer c.count.Unlock()
	if _, ok := c.m.Load(event); !ok {
		if c.size >= maxCachedEvents {
			return
		}
		c.size++
	}
	c.m.Store(event, ld)
}

// placeArgs returns the ARGV of a ticket's place: the N the cached draw of its line has
// ("0" when none is known) and the ticket's place in it.
func (s *Store) placeArgs(ref queue.TicketRef) (nArg, placeArg string) {
	ld := s.draws.get(ref.Event)
	if ld == nil || ld.gen != ref.Generation || ld.d == nil {
		return "0", "0"
	}
	return strconv.FormatInt(ld.n, 10), strconv.FormatInt(ld.d.Place(ref.Number), 10)
}

// learnDraw reads a DRAW_MOVED, NEED_PLACE or DRAW_LEFT reply ({code, generation, N, seed
// hex, ...}) and caches the line's draw. Errors: a malformed reply or seed.
func (s *Store) learnDraw(event string, r *reply) (*lineDraw, error) {
	ld := &lineDraw{gen: uint32(r.Int(1)), n: r.Int(2)}
	seedHex := r.Str(3)
	if err := r.Err(); err != nil {
		return nil, err
	}
	if ld.n > 0 {
		seed, err := hex.DecodeString(seedHex)
		if err != nil {
			return nil, fmt.Errorf("redisstore: the draw's seed of %s: %w", event, err)
		}
		if ld.d, err = draw.New(seed, ld.n); err != nil {
			return nil, fmt.Errorf("redisstore: the draw of %s: %w", event, err)
		}
	}
	s.draws.put(event, ld)
	return ld, nil
}

// drawVoid returns the numbers up to n still void (resume.lua: their holders have not shown
// up since the line resumed after a loss), ascending: those of left (members, the tickets
// left or void; keys the line's) flagged void (batx v<n>). They drew places nobody holds, and
// stay void after a later loss (queue.Numbers.Draw). Errors: Redis's.
func (s *Store) drawVoid(ctx context.Context, keys, members []string, n int64) ([]int64, error) {
	vd, err := s.client.Do(ctx, s.client.B().Hget().Key(keys[0]).Field("vd").Build()).AsInt64()
	if rueidis.IsRedisNil(err) || (err == nil && vd <= 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cand []int64
	for _, m := range members {
		if v, err := strconv.ParseInt(m, 10, 64); err == nil && v >= 1 && v <= n {
			cand = append(cand, v)
		}
	}
	slices.Sort(cand)
	var void []int64
	const chunk = 1000
	for i := 0; i < len(cand); i += chunk {
		part := cand[i:min(i+chunk, len(cand))]
		fields := make([]string, len(part))
		for j, v := range part {
			fields[j] = "v" + strconv.FormatInt(v, 10)
		}
		got, err := s.client.Do(ctx, s.client.B().Hmget().Key(keys[5]).Field(fields...).Build()).ToArray()
		if err != nil {
			return nil, err
		}
		for j := range got {
			if !got[j].IsNil() {
				void = append(void, part[j])
			}
		}
	}
	return void, nil
}

// scoreLeft settles ld's draw of event's line for the scripts (they answer DRAW_LEFT until
// then, drw 2 in lua/common.lua): it records N with the line's durable numbers in SQL
// (queue.Numbers.Draw; with Config.Numbers), so that a line resumed after a loss keeps its draw,
// and gives the tickets that left the pre-queue before the opening their places
// (draw_left.lua). Once at a time per event per instance: the calls that need it meanwhile (a
// herd of status reads at the opening) wait for the one running, then call their script again.
func (s *Store) scoreLeft(ctx context.Context, event string, ld *lineDraw) error {
	return shared(ctx, &s.draws.scoring, event, func(ctx context.Context) error { return s.settleDraw(ctx, event, ld) })
}

func (s *Store) settleDraw(ctx context.Context, event string, ld *lineDraw) error {
	keys := s.lineKeys(event)
	members, err := s.client.Do(ctx, s.client.B().Zrange().Key(keys[1]).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		return fmt.Errorf("redisstore: the draw's leavers: %w", err)
	}
	if s.dur.numbers != nil && ld.n > 0 {
		void, err := s.drawVoid(ctx, keys, members, ld.n)
		if err != nil {
			return fmt.Errorf("redisstore: record the draw: %w", err)
		}
		if err := s.dur.numbers.Draw(ctx, event, ld.n, void); err != nil {
			return fmt.Errorf("redisstore: record the draw: %w", err)
		}
	}
	const chunk = 1000
	head := []string{s.nowArg(), strconv.FormatUint(uint64(ld.gen), 10), strconv.FormatInt(ld.n, 10), "0"}
	for i := 0; ; i += chunk {
		end := min(i+chunk, len(members))
		args := append(head[:4:4], make([]string, 0, 2*(end-i))...)
		for _, m := range members[i:end] {
			n, err := strconv.ParseInt(m, 10, 64)
			if err != nil {
				return fmt.Errorf("redisstore: the draw's leavers: member %q", m)
			}
			if ld.d == nil || n > ld.n {
				continue // left after the opening: scored by place already
			}
			args = append(args, strconv.FormatInt(ld.d.Place(n), 10), m)
		}
		if end == len(members) {
			args[3] = "1"
		}
		if err := drawLeftScript.Exec(ctx, s.client, keys, args).Error(); err != nil {
			return fmt.Errorf("redisstore: the draw's leavers: %w", err)
		}
		if end == len(members) {
			return nil
		}
	}
}

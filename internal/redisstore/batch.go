package redisstore

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Joins of one event that arrive together are sent as one call of the batched join
// (joinBatchSource): Redis pays a script call's fixed cost (the command, its keys and arguments
// made Lua values, the reply) once per batch instead of once per join, and the instance writes
// and reads one command instead of many. Each join of a batch is still join.lua's atomic step,
// in the batch's order: the batch is one atomic step of them all.
//
// No join waits for a batch to fill: a join that finds no call of its event in flight goes at
// once, alone, as join.lua; those that arrive while one is in flight queue, and go together as
// the next call when it ends (at most joinBatchMax to a call). So at most one join call per event
// is in flight from an instance, and a batch holds the joins that arrived during one round trip.

// joinBatchMax bounds the joins of one batched call: 64 joins run in Redis for about half a
// millisecond, during which its other commands wait.
const joinBatchMax = 64

// joinCall is one join waiting in a batcher's queue.
type joinCall struct {
	args []string      // join.lua's ARGV
	ch   string        // its 14th key, the bucket of used challenges of a join with one ("" none)
	r    *reply        // its reply, set before done is signalled
	done chan struct{} // gets one value when r is set (buffered: drain never blocks)
}

// joinBatcher groups the joins of one event.
type joinBatcher struct {
	mu    sync.Mutex
	busy  bool        // a join call of the event is in flight (or a drain goroutine runs)
	queue []*joinCall // joins waiting for the next call, in arrival order
	// batch and args are drain's, kept from one drain to the next (one runs at a time: busy).
	batch []*joinCall
	args  []string
}

// batchers holds the joinBatchers by event id, bounded by maxCachedEvents (beyond it joins go
// one by one).
type batchers struct {
	m sync.Map // event id -> *joinBatcher
	n atomic.Int64
	// calls and joins count the calls drain sent and the joins in them (tests read them).
	calls, joins atomic.Int64
}

func (bs *batchers) get(event string) *joinBatcher {
	if b, ok := bs.m.Load(event); ok {
		return b.(*joinBatcher)
	}
	if bs.n.Load() >= maxCachedEvents {
		return nil
	}
	b, loaded := bs.m.LoadOrStore(event, new(joinBatcher))
	if !loaded {
		bs.n.Add(1)
	}
	return b.(*joinBatcher)
}

// joinOnce runs join.lua once for event with keys and args, batched with the event's other joins
// when any is in flight. keys are joinKeys(event) or their first 8 (then args need no other),
// and for a join with a challenge the bucket of used challenges as a 14th key: such joins are
// batched with those of the same bucket only (the batch's call has one set of KEYS; the joins
// of a minute share one bucket). ctx bounds the wait of this join only: a batch's call is not
// cancelled by any one of its joins (one cancelled before its batch is sent is taken out of it;
// after, it may still be made, as a single call cancelled in flight may).
func (s *Store) joinOnce(ctx context.Context, event string, keys, args []string) *reply {
	b := s.joins.get(event)
	if b == nil {
		return readReply(joinScript.Exec(ctx, s.client, keys, args).ToArray())
	}
	b.mu.Lock()
	if !b.busy {
		// Nothing in flight: go at once, alone, as join.lua.
		b.busy = true
		b.mu.Unlock()
		r := readReply(joinScript.Exec(ctx, s.client, keys, args).ToArray())
		s.handOff(b, event)
		return r
	}
	c := callPool.Get().(*joinCall)
	c.args, c.ch = args, ""
	if len(keys) > 13 {
		c.ch = keys[13]
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		r := c.r
		c.args, c.r = nil, nil
		callPool.Put(c)
		return r
	case <-ctx.Done():
	}
	b.mu.Lock()
	i := slices.Index(b.queue, c)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	b.mu.Unlock()
	if i >= 0 { // taken out before its call: nobody else holds c
		c.args = nil
		callPool.Put(c)
		return &reply{err: ctx.Err()}
	}
	select {
	case <-c.done: // its call answered meanwhile: the join was made, say so
		r := c.r
		c.args, c.r = nil, nil
		callPool.Put(c)
		return r
	default: // its call is out: c is left to the collector (drain still answers it)
		return &reply{err: ctx.Err()}
	}
}

// callPool holds idle joinCalls (their done channels are reused: one send per call).
var callPool = sync.Pool{New: func() any { return &joinCall{done: make(chan struct{}, 1)} }}

// handOff ends a call of b's: the joins queued meanwhile go in a goroutine of their own (so that
// the caller returns now), or b is idle again.
func (s *Store) handOff(b *joinBatcher, event string) {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go s.drain(b, event)
}

// drain sends b's queued joins, up to joinBatchMax to a call, until none is queued. A call takes
// the first queued join and those after it with the same bucket of used challenges (the rest
// stay queued, in order, for the next call).
func (s *Store) drain(b *joinBatcher, event string) {
	plain := s.joinKeys(event)
	var keys []string
	batch, args := b.batch, b.args
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			clear(args[:cap(args)]) // no strings kept alive
			b.batch, b.args = batch[:0], args[:0]
			b.busy = false
			b.mu.Unlock()
			return
		}
		ch := b.queue[0].ch
		batch = batch[:0]
		rest := b.queue[:0]
		for _, c := range b.queue { // in place: rest is never ahead of the reading
			if c.ch == ch && len(batch) < joinBatchMax {
				batch = append(batch, c)
			} else {
				rest = append(rest, c)
			}
		}
		clear(b.queue[len(rest):])
		b.queue = rest
		b.mu.Unlock()
		keys = plain
		if ch != "" {
			keys = append(plain[:len(plain):len(plain)], ch)
		}
		args = args[:0]
		for _, c := range batch {
			args = append(args, argCount(len(c.args)))
			args = append(args, c.args...)
		}
		// Not any caller's context: one join cancelled must not fail the others (rueidis's
		// ConnWriteTimeout bounds a call that gets no answer; a caller's own deadline still
		// ends its own wait).
		s.joins.calls.Add(1)
		s.joins.joins.Add(int64(len(batch)))
		if len(batch) == 1 {
			// Alone: join.lua itself, which Redis runs for a little less.
			c := batch[0]
			c.r = readReply(joinScript.Exec(context.Background(), s.client, keys, c.args).ToArray())
			c.done <- struct{}{}
			batch[0] = nil
			continue
		}
		v, err := joinBatchScript.Exec(context.Background(), s.client, keys, args).ToArray()
		if err == nil && len(v) != 1+len(batch) {
			err = errShortReply
		}
		var h *batchHead
		if err == nil {
			h, err = readHead(v[0])
		}
		for i, c := range batch {
			switch {
			case err != nil:
				c.r = &reply{err: err}
			case v[i+1].IsInt64():
				// A new ticket the head stands for: its number alone.
				n, _ := v[i+1].AsInt64()
				c.r = &reply{h: h, n: n}
				if h == nil {
					c.r.err = errShortReply
				}
			default:
				c.r = readReply(v[i+1].ToArray())
			}
			c.done <- struct{}{}
		}
		clear(batch)
	}
}

// argCounts are the counts of ARGV the batched join reads before each join's arguments.
var argCounts = func() (c [16]string) {
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}()

func argCount(n int) string {
	if n < len(argCounts) {
		return argCounts[n]
	}
	return strconv.Itoa(n)
}

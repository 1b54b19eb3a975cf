package push

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/queue"
)

// subscribe keeps the room subscribed to its event's channel until the room ends. rueidis
// resubscribes on its own only while the connection lives; after a reconnect Receive returns,
// this loop subscribes again and the next tick heals whatever was published meanwhile.
func (r *room) subscribe() {
	h := r.hub
	sub := func() rueidis.Completed {
		if h.sharded {
			return h.redis.B().Ssubscribe().Channel(r.channel).Build()
		}
		return h.redis.B().Subscribe().Channel(r.channel).Build()
	}
	ctx := rueidis.WithOnSubscriptionHook(r.ctx, func(s rueidis.PubSubSubscription) {
		// Called on rueidis's reading goroutine: flags only, nothing that waits.
		switch s.Kind {
		case "subscribe", "ssubscribe":
			r.subscribed.Store(true)
			if r.subscribes.Add(1) > 1 {
				r.healSoon() // messages published while we were away are lost
			}
		case "unsubscribe", "sunsubscribe":
			r.subscribed.Store(false)
		}
	})
	backoff := 50 * time.Millisecond
	for r.ctx.Err() == nil {
		start := time.Now()
		err := h.redis.Receive(ctx, sub(), r.onMessage)
		r.subscribed.Store(false)
		if r.ctx.Err() != nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		h.log.Warn("push: subscription ended; subscribing again", "channel", r.channel, "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	// A cancelled Receive leaves the connection subscribed on the server: unsubscribe it, so
	// Redis stops sending this instance the event's messages.
	uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var unsub rueidis.Completed
	if h.sharded {
		unsub = h.redis.B().Sunsubscribe().Channel(r.channel).Build()
	} else {
		unsub = h.redis.B().Unsubscribe().Channel(r.channel).Build()
	}
	_ = h.redis.Do(uctx, unsub).Error() // best effort: the client may be closing
}

// onMessage handles one channel message. It runs on the subscription's goroutine, so it only
// parses and queues.
func (r *room) onMessage(m rueidis.PubSubMessage) {
	h := r.hub
	kind, origin, from, to, ts, ok := parseMessage(m.Message)
	if !ok {
		h.log.Warn("push: ignoring a malformed channel message", "channel", m.Channel)
		return
	}
	if origin == h.origin {
		return // our own batch: delivered locally already
	}
	h.received.Add(1)
	switch kind {
	case 'a':
		r.addBatch(batch{from: from, to: to, ts: ts, src: srcRemote})
	case 'h':
		r.healSoon()
	}
}

// parseMessage reads "a <origin> <from> <to> <ts_ms>" or "h <origin> <ts_ms>".
func parseMessage(s string) (kind byte, origin string, from, to int64, ts time.Time, ok bool) {
	f := strings.Fields(s)
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, "", 0, 0, time.Time{}, false
	}
	kind, origin = f[0][0], f[1]
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			ok = false
		}
		return v
	}
	ok = true
	switch {
	case kind == 'a' && len(f) == 5:
		from, to, ts = num(f[2]), num(f[3]), queue.FromMS(num(f[4]))
		ok = ok && from >= 1 && to >= from
	case kind == 'h' && len(f) == 3:
		ts = queue.FromMS(num(f[2]))
	default:
		ok = false
	}
	return kind, origin, from, to, ts, ok
}

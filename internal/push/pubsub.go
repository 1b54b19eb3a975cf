package push

import (
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
)

// subscribe keeps the room subscribed to its event's topic until the room ends. The notifier
// subscribes again by itself after a lost connection; a confirmation after the first means
// messages published meanwhile may be lost, so the next tick heals without waiting.
func (r *room) subscribe() {
	r.hub.notifier.Subscribe(r.ctx, store.EventTopic(r.event), r.onMessage, func(ok bool) {
		// Called on the subscription's goroutine: flags only, nothing that waits.
		r.subscribed.Store(ok)
		if ok && r.subscribes.Add(1) > 1 {
			r.healSoon()
		}
	})
}

// onMessage handles one channel message. It runs on the subscription's goroutine, so it only
// parses and queues.
func (r *room) onMessage(m string) {
	h := r.hub
	if strings.HasPrefix(m, "e ") {
		r.onEnded(m)
		return
	}
	kind, origin, from, to, ts, ok := parseMessage(m)
	if !ok {
		h.log.Warn("push: ignoring a malformed channel message", "event", r.event)
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

// onEnded handles a message of tickets that ended through another instance: their connections
// here are read again (not_found, or completed).
func (r *room) onEnded(m string) {
	h := r.hub
	origin, gen, ns, ok := parseEnded(m)
	if !ok {
		h.log.Warn("push: ignoring a malformed channel message", "event", r.event)
		return
	}
	if origin == h.origin {
		return // told locally already
	}
	h.received.Add(1)
	h.recheck(r.connsOf(gen, ns))
}

// parseEnded reads "e <origin> <gen> <ts_ms> <n>..." (at least one number, each at least 1).
func parseEnded(s string) (origin string, gen uint32, ns []int64, ok bool) {
	f := strings.Fields(s)
	if len(f) < 5 || f[0] != "e" {
		return "", 0, nil, false
	}
	g, err := strconv.ParseUint(f[2], 10, 32)
	if err != nil {
		return "", 0, nil, false
	}
	if _, err := strconv.ParseInt(f[3], 10, 64); err != nil {
		return "", 0, nil, false
	}
	ns = make([]int64, 0, len(f)-4)
	for _, x := range f[4:] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil || n < 1 {
			return "", 0, nil, false
		}
		ns = append(ns, n)
	}
	return f[1], uint32(g), ns, true
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

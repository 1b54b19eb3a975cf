package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/waitroom/waitroom/internal/push"
)

// wsSettle is the quiet time between the last connection and the line moving.
const wsSettle = 6 * time.Second

// wsReserve is the file descriptors kept free for everything but the connections (listener,
// Redis and PostgreSQL pools, logs) in the instance and in this process.
const wsReserve = 64

// wsConn is one client connection of the push target.
type wsConn struct {
	c       *websocket.Conn
	first   int64        // position in the first message
	updated atomic.Int64 // unix ns of the first update after the trigger, 0 = none yet
	sentMS  atomic.Int64 // that update's "ts" (the hub's clock when it made it, unix ms)
}

// pushMessage is the part of a push message the bench reads.
type pushMessage struct {
	Type     string `json:"type"`
	TS       int64  `json:"ts"`
	Position int64  `json:"position"`
}

// noFileLimit raises the soft open-file limit to the hard one and returns it.
func noFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 1024
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return int(min(l.Cur, 1<<30))
}

// wsTargets: one instance holds cfg.WSConns WebSockets (RSS per connection) and pushes a
// position update to all of them when the line moves.
func (e *env) wsTargets(ctx context.Context, rep *Report) {
	const ev = "ws"
	want := e.cfg.WSConns
	n := want
	limit := noFileLimit()
	if n > limit-wsReserve {
		n = limit - wsReserve
		e.note("the open-file limit is %d per process (hard limit; raising it needs CAP_SYS_RESOURCE), so one process cannot hold %s sockets plus its listener and pools: the push target ran with %s connections",
			limit, thousands(float64(want)), thousands(float64(n)))
	}
	// The instance (which inherits this limit) keeps a share of its files free of push
	// connections, so that /healthz, /readyz and admin calls still answer (issue 12).
	if capN := push.DefaultMaxConnsFor(uint64(limit)); n > capN {
		n = capN
		e.note("with %d open files an instance caps its push connections at %s, keeping the rest for health checks, admin calls and its pools (push.DefaultMaxConnsFor): the push target ran with %s connections",
			limit, thousands(float64(capN)), thousands(float64(n)))
	}

	// The tickets are taken through a first instance, so that the one measured starts fresh:
	// its RSS before the connections is that of an idle instance, not one with a heap grown
	// by the joins.
	in, err := e.startInstance(ctx)
	if err != nil {
		rep.fail("ws/push", err)
		return
	}
	ids, first, err := e.wsTickets(ctx, in, ev, n)
	in.stop()
	if err != nil {
		rep.fail("ws/push", err)
		return
	}
	if in, err = e.startInstance(ctx); err != nil {
		rep.fail("ws/push", err)
		return
	}
	defer in.stop()
	wsBase := "ws" + strings.TrimPrefix(in.base, "http") + "/v1/events/" + ev + "/tickets/"

	// Probe: is there a push route?
	probe, resp, err := websocket.Dial(ctx, wsBase+ids[0]+"/ws", nil)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			rep.add("ws/push", Unavailable, "GET /v1/events/{id}/tickets/{ticket}/ws answers 404 on this build: no push route (internal/push not mounted)")
			return
		}
		rep.fail("ws/push", fmt.Errorf("websocket dial: %w", err))
		return
	}
	_ = probe.CloseNow()
	time.Sleep(time.Second) // let the probe's connection end
	rss0, err := in.rss()
	if err != nil {
		rep.fail("ws/push", err)
		return
	}

	e.progress("opening %s WebSockets", thousands(float64(n)))
	conns, err := e.wsOpen(ctx, wsBase, ids)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.c.CloseNow()
			}
		}
	}()
	if err != nil {
		rep.fail("ws/push", err)
		return
	}
	// Settle longer than the hub's position intervals (a new place at most every second, a
	// new line length or ETA alone at most every 5 s: internal/push positionDue), so that the
	// message each connection got when it opened no longer holds its next one back.
	e.progress("all %s connections have their first message; settling for %s", thousands(float64(n)), wsSettle)
	time.Sleep(wsSettle)
	rss1, err := in.rss()
	if err != nil {
		rep.fail("ws/push", err)
		return
	}
	perConn := float64(rss1-rss0) / float64(n)

	// The line moves by one: the admitted ticket 1 leaves, the processor admits ticket 2, and
	// every connection's position drops by one.
	e.progress("ticket 1 leaves; waiting for every connection's update")
	trigger := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, in.base+"/v1/events/"+ev+"/tickets/"+first, nil)
	resp, err = http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			err = fmt.Errorf("leave: %d", resp.StatusCode)
		}
	}
	if err != nil {
		rep.fail("ws/push", err)
		return
	}
	deadline := time.Now().Add(15 * time.Second)
	var got int
	for {
		got = 0
		for _, c := range conns {
			if c.updated.Load() != 0 {
				got++
			}
		}
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// delays: line moved -> received; made: line moved -> the hub made the message (its ts);
	// transit: made -> received (writing and reading 20,000 frames on one machine).
	delays := make([]float64, 0, got)
	var made, transit []float64
	for _, c := range conns {
		if t := c.updated.Load(); t != 0 {
			delays = append(delays, float64(time.Duration(t-trigger.UnixNano())))
			if ts := c.sentMS.Load(); ts > 0 {
				sent := time.UnixMilli(ts)
				made = append(made, float64(sent.Sub(trigger)))
				transit = append(transit, float64(time.Unix(0, t).Sub(sent)))
			}
		}
	}
	slices.Sort(delays)
	var all, p50 time.Duration
	if len(delays) > 0 {
		all, p50 = time.Duration(delays[len(delays)-1]), time.Duration(median(delays))
	}
	countOK, memOK, timeOK := n >= 20_000, perConn <= 16*1024, got == n && all <= 2*time.Second
	rep.add("ws/push", holds(countOK && memOK && timeOK),
		"one instance holds %s WebSockets [20,000: %s]: %.1f KiB RSS each (RSS %.0f -> %.0f MiB) [<= 16 KiB: %s]; a position update reached %s of them %s after the line moved (p50 %s) [all within 2 s: %s]",
		thousands(float64(n)), part(countOK), perConn/1024, float64(rss0)/(1<<20), float64(rss1)/(1<<20), part(memOK),
		thousands(float64(got)), all.Round(time.Millisecond), p50.Round(time.Millisecond), part(timeOK))
	rep.info("instance RSS per 10k WebSockets", "%.0f MiB", perConn*10_000/(1<<20))
	if len(made) > 0 {
		slices.Sort(made)
		slices.Sort(transit)
		rep.info("push: line moved -> message made", "p50 %s, max %s (admission step, hub tick, position interval)",
			time.Duration(median(made)).Round(time.Millisecond), time.Duration(made[len(made)-1]).Round(time.Millisecond))
		rep.info("push: message made -> received", "p50 %s, max %s (writing and reading the frames)",
			time.Duration(median(transit)).Round(time.Millisecond), time.Duration(transit[len(transit)-1]).Round(time.Millisecond))
	}
}

// wsTickets takes ticket 1 (admitted: the one that leaves later) and n waiting tickets,
// through in's HTTP API.
func (e *env) wsTickets(ctx context.Context, in *instance, ev string, n int) (ids []string, first string, err error) {
	if err := in.putEvent(ctx, ev, 1); err != nil {
		return nil, "", err
	}
	c := newLoadClient(httpConns)
	defer c.CloseIdleConnections()
	t, _, err := in.join(ctx, c, ev)
	if err != nil {
		return nil, "", err
	}
	if t.Status != "ADMITTED" {
		return nil, "", fmt.Errorf("the first ticket of event %s is %s, want ADMITTED", ev, t.Status)
	}
	e.progress("taking %s tickets", thousands(float64(n)))
	if ids, err = e.takeTickets(ctx, in, c, ev, n); err != nil {
		return nil, "", err
	}
	return ids, t.TicketID, nil
}

// wsOpen opens one WebSocket per ticket (256 handshakes at a time) and returns when each has
// received its first message. Each connection's reader notes the first update after that.
func (e *env) wsOpen(ctx context.Context, base string, ids []string) ([]*wsConn, error) {
	conns := make([]*wsConn, len(ids))
	octx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 256 {
		wg.Go(func() {
			for octx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					return
				}
				c, err := e.wsDial(octx, base+ids[i]+"/ws")
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("connection %d: %w", i, err))
					cancel()
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok && err != nil {
		return conns, err
	}
	if octx.Err() != nil {
		return conns, errors.New("opening the connections took more than 3 minutes")
	}
	return conns, nil
}

// wsDial opens one connection, reads its first message (the ticket's position), then reads
// on in the background until the connection ends.
func (e *env) wsDial(ctx context.Context, url string) (*wsConn, error) {
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(4096)
	_, b, err := c.Read(ctx)
	if err != nil {
		_ = c.CloseNow()
		return nil, err
	}
	var m pushMessage
	if err := json.Unmarshal(b, &m); err != nil || m.Type != "position" {
		_ = c.CloseNow()
		return nil, fmt.Errorf("first message %s, want a position", b)
	}
	wc := &wsConn{c: c, first: m.Position}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			var m pushMessage
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			if (m.Type == "position" && m.Position < wc.first) || m.Type == "admitted" {
				if wc.updated.CompareAndSwap(0, time.Now().UnixNano()) {
					wc.sentMS.Store(m.TS)
				}
			}
		}
	}()
	return wc, nil
}

// part names whether one part of a target holds.
func part(ok bool) string {
	if ok {
		return "holds"
	}
	return "not met"
}

package crowd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Push mode (--push): after joining, a queued user waits on its ticket's WebSocket
// (GET .../tickets/{ticket_id}/ws) instead of polling, as the waiting-room page does. The
// latency of each "admitted" message, from its ts (the admission batch's store time) to its
// receipt, goes to Report.PushLatencyMS.
//
// The server sends messages only when something changes, and pings every 20 s (push's
// PingInterval), which a client's library answers without telling it: a stopped instance (or a
// network that drops everything) is a socket that just says nothing. So the user pings when
// the socket has said nothing for half of Config.PushSilence, and closes it when the pong does
// not come within the other half (Report.PushSilent). A socket that closes, fails or goes
// silent before a final message (Report.PushFallbacks) is followed by one poll on the next
// instance and a new socket there (see runUser); an upgrade refused with a 4xx leaves the
// user polling.

// pushMsg is the part of a push message the users need.
type pushMsg struct {
	Type    string `json:"type"`
	TS      int64  `json:"ts"`
	Number  int64  `json:"number"`
	Serving int64  `json:"serving"`
}

// maxPushMessage bounds one push message (bytes); an admitted message is about 600.
const maxPushMessage = 64 << 10

// The hub writes "type" first; messages of these types only mean "keep waiting".
var (
	positionPrefix = []byte(`{"type":"position"`)
	statsPrefix    = []byte(`{"type":"stats"`)
)

// dialPush opens the ticket's WebSocket. Upgrades have their own Concurrency slots rather
// than the request workers': a flash crowd's thousands of upgrades must not hold up the leaves
// of admitted users, which free the slots everyone else waits for. A failure is counted under
// Errors as "push_<status>" or "push_transport" (not as an HTTP error: the user falls back to
// polling). refused is true when the upgrade was answered with a 4xx other than 429;
// retryAfter is the jittered Retry-After of a 429 or 503 (0 without one).
func (r *runner) dialPush(ctx context.Context, user int, ticketURL string) (ws *websocket.Conn, refused bool, retryAfter time.Duration) {
	select {
	case r.dialSlots <- struct{}{}:
		defer func() { <-r.dialSlots }()
	case <-ctx.Done():
		return nil, false, 0
	}
	r.requests.Add(1)
	dctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(ticketURL, "http")+"/ws",
		&websocket.DialOptions{HTTPClient: r.clientOf(user)})
	if err != nil {
		if ctx.Err() == nil {
			key := "push_transport"
			if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
				key = "push_" + strconv.Itoa(resp.StatusCode)
				refused = resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests
				retryAfter = jitterUp(parseRetryAfter(resp.Header.Get("Retry-After")))
			}
			r.addError(key)
		}
		return nil, refused, retryAfter
	}
	ws.SetReadLimit(maxPushMessage)
	return ws, false, 0
}

// parseRetryAfter reads a Retry-After of delay-seconds (0 when absent or a date).
func parseRetryAfter(v string) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(min(s, 3600)) * time.Second
}

// jitterUp spreads a server's Retry-After d over [d, 1.5 d], so that the clients it refused
// at once do not come back at once.
func jitterUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + rand.N(d/2+1)
}

// pushResult is how a push wait ended.
type pushResult int

const (
	pushDone    pushResult = iota // admitted or terminal: the outcome is final
	pushFailed                    // no socket, or it closed, failed or went silent before pushHealthyAfter
	pushHealthy                   // as pushFailed, after the socket lived pushHealthyAfter
	pushRefused                   // the upgrade was answered with a 4xx: poll instead
)

// pushHealthyAfter is how long a socket must have lived for its end not to count as a failure
// in a row (which grows the back-off before the next one): twice the silence that closes one.
// A socket that opens and delivers its first message but dies within it is the reconnect
// storm of an overloaded fleet (issue 22: sockets replaced at once, again and again, each
// reconnect costing a poll, a handshake and a store read); backing off is what lets it end.
func (r *runner) pushHealthyAfter() time.Duration { return 2 * r.cfg.PushSilence }

// waitPush waits on the ticket's WebSocket on the user's instance until the ticket is admitted
// or ends (pushDone, with the outcome), or the socket fails (see pushResult; retryAfter is a
// refused upgrade's jittered Retry-After). A "not_found" message ends the wait as a failure:
// the poll that follows confirms the ticket is gone.
func (r *runner) waitPush(c *call, ticketID string, joinStart time.Time) (_ pushResult, _ outcome, retryAfter time.Duration) {
	ctx := c.ctx
	ws, refused, retryAfter := r.dialPush(ctx, c.user, r.ticketURL(c.target, ticketID))
	if ws == nil {
		if ctx.Err() != nil {
			return pushDone, outLost, 0
		}
		r.pushFallbacks.Add(1)
		if refused {
			return pushRefused, 0, 0
		}
		return pushFailed, 0, retryAfter
	}
	defer ws.CloseNow()
	opened := time.Now()
	live := r.watchSilence(ctx, ws)
	defer live.stop()
	failed := func() pushResult {
		if time.Since(opened) >= r.pushHealthyAfter() {
			return pushHealthy
		}
		return pushFailed
	}
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return pushDone, outLost, 0
			}
			switch {
			case live.silent():
				r.pushSilent.Add(1)
			case websocket.CloseStatus(err) == -1 && !errors.Is(err, context.Canceled):
				// Closed without a close frame; 1012 (the instance restarts) is not an error.
				r.addError("push_closed")
			}
			r.pushFallbacks.Add(1)
			return failed(), 0, 0
		}
		live.heard()
		recv := time.Now()
		if bytes.HasPrefix(b, positionPrefix) || bytes.HasPrefix(b, statsPrefix) {
			continue // the common case, not worth decoding
		}
		var m pushMsg
		if err := json.Unmarshal(b, &m); err != nil {
			r.addError(errDecode)
			continue
		}
		switch m.Type {
		case "admitted":
			r.pushLatency.record(recv.Sub(time.UnixMilli(m.TS)).Microseconds())
			r.pushAdmitted.Add(1)
			if m.Number > m.Serving {
				r.violation(FIFOExample{Kind: "admitted_above_serving", Target: r.cfg.Targets[c.target],
					Status: statusAdmitted, Number: m.Number, Serving: m.Serving, MaxServingAtSend: r.maxServing.Load()})
			}
			atomicMax(&r.maxServing, m.Serving)
			_ = ws.Close(websocket.StatusNormalClosure, "")
			return pushDone, r.admittedUser(c, ticketID, joinStart), 0
		case "expired", "sold_out", "closed", "completed":
			r.addTerminal(strings.ToUpper(m.Type))
			return pushDone, outTerminal, 0
		case "not_found":
			r.pushFallbacks.Add(1)
			return failed(), 0, 0
		}
		// position, stats: keep waiting
	}
}

// silence watches one socket: a timer (no goroutine while it waits) that pings the socket
// when it has said nothing for half of PushSilence and closes it when the pong does not come
// within the other half. The ping runs on the timer's goroutine while the user's Read, which
// takes the pong in, goes on.
type silence struct {
	last atomic.Int64 // unix ns of the last message (or pong)
	dead atomic.Bool  // closed for silence

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func (r *runner) watchSilence(ctx context.Context, ws *websocket.Conn) *silence {
	half := r.cfg.PushSilence / 2
	s := &silence{}
	s.heard()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The first look comes a random part of a quarter later, so that sockets opened together
	// (a flash crowd) do not all ask in the same instant.
	s.timer = time.AfterFunc(half+rand.N(half/4+1), func() {
		idle := time.Since(time.Unix(0, s.last.Load()))
		if idle >= half {
			pctx, cancel := context.WithTimeout(ctx, half)
			err := ws.Ping(pctx)
			cancel()
			if err != nil {
				if !s.isStopped() && ctx.Err() == nil {
					s.dead.Store(true)
					ws.CloseNow() // the user's Read returns at once
				}
				return
			}
			s.heard() // the pong: the socket is alive
			idle = 0
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.stopped {
			s.timer.Reset(half - idle)
		}
	})
	return s
}

func (s *silence) heard()       { s.last.Store(time.Now().UnixNano()) }
func (s *silence) silent() bool { return s.dead.Load() }

func (s *silence) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// stop ends the watch; a ping in flight finds the socket closed and does nothing more.
func (s *silence) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.timer.Stop()
}

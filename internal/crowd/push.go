package crowd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Push mode (--push): after joining, a queued user waits on its ticket's WebSocket
// (GET .../tickets/{ticket_id}/ws) instead of polling, as the waiting-room page does. The
// latency of each "admitted" message, from its ts (the admission batch's store time) to its
// receipt, goes to Report.PushLatencyMS. A user whose socket cannot be opened, or closes
// before a final message, falls back to polling (Report.PushFallbacks).

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
// polling).
func (r *runner) dialPush(ctx context.Context, user int, ticketURL string) *websocket.Conn {
	select {
	case r.dialSlots <- struct{}{}:
		defer func() { <-r.dialSlots }()
	case <-ctx.Done():
		return nil
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
			}
			r.addError(key)
		}
		return nil
	}
	ws.SetReadLimit(maxPushMessage)
	return ws
}

// waitPush waits on the ticket's WebSocket until it is admitted or ends. handled is false
// when the user should poll instead (the socket failed); out is then meaningless.
func (r *runner) waitPush(c *call, ticketURL string, joinStart time.Time) (out outcome, handled bool) {
	ctx := c.ctx
	ws := r.dialPush(ctx, c.user, ticketURL)
	if ws == nil {
		if ctx.Err() != nil {
			return outLost, true
		}
		r.pushFallbacks.Add(1)
		return 0, false
	}
	defer ws.CloseNow()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return outLost, true
			}
			// Closed before a final message (1012: the instance restarts): poll instead.
			if websocket.CloseStatus(err) == -1 && !errors.Is(err, context.Canceled) {
				r.addError("push_closed")
			}
			r.pushFallbacks.Add(1)
			return 0, false
		}
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
			return r.admittedUser(c, ticketURL, joinStart), true
		case "expired", "sold_out", "closed", "completed":
			r.addTerminal(strings.ToUpper(m.Type))
			return outTerminal, true
		case "not_found":
			r.addTerminal(terminalNotFound)
			return outTerminal, true
		}
		// position, stats: keep waiting
	}
}

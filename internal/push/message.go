package push

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
)

// Message types sent to clients. Every message is one JSON object with "type" and "ts", the
// server time in Unix milliseconds of the state it reports: the admission batch's store time
// for "admitted" (so that receipt minus ts is the delivery latency), the hub's clock for
// "position" and "stats", the store's clock otherwise.
//
//	position   {"position": 1-based place in line, "waiting": tickets in line,
//	            "eta_s": seconds until admission or null when the rate is unknown}
//	admitted   {"admission_token", "admitted_until" (RFC 3339, ms), "redirect_url" or null,
//	            "number": the ticket number, "serving": the serving counter}
//	expired    the admitted session ended (idle, unclaimed or at session_max_s)
//	sold_out   the event sold out while the ticket was waiting
//	closed     the event closed while the ticket was waiting
//	completed  the admitted session ended with a sale
//	not_found  the ticket left, or its line was reset: join again
//	stats      {"waiting", "active", "serving"}: the event's counters
//	reconnect  (SSE only) the instance is shutting down: connect again; a WebSocket gets the
//	           close code 1012 (service restart) instead
//	pong       (WebSocket) the answer to the client's {"type":"ping"}
//	ping       (SSE) a heartbeat every HeartbeatInterval, as an event named "ping" (so that
//	           EventSource.onmessage does not see it): the page's proof that the stream lives
//
// Pages cannot see the WebSocket's protocol pings nor SSE comments, so a connection that a
// proxy stopped forwarding looks to them like a quiet line; ping and pong are what they watch.
const (
	TypePosition  = "position"
	TypeAdmitted  = "admitted"
	TypeExpired   = "expired"
	TypeSoldOut   = "sold_out"
	TypeClosed    = "closed"
	TypeCompleted = "completed"
	TypeNotFound  = "not_found"
	TypeStats     = "stats"
	TypeReconnect = "reconnect"
	TypePing      = "ping"
	TypePong      = "pong"
)

func head(b []byte, typ string, ts time.Time) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","ts":`...)
	return strconv.AppendInt(b, ts.UnixMilli(), 10)
}

// simpleMessage is a message with no field beyond type and ts.
func simpleMessage(typ string, ts time.Time) []byte {
	b := head(make([]byte, 0, 48), typ, ts)
	return append(b, '}')
}

func positionMessage(ts time.Time, position, waiting, etaS int64) []byte {
	b := head(make([]byte, 0, 96), TypePosition, ts)
	b = append(b, `,"position":`...)
	b = strconv.AppendInt(b, position, 10)
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, waiting, 10)
	b = append(b, `,"eta_s":`...)
	if etaS >= 0 {
		b = strconv.AppendInt(b, etaS, 10)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

func statsMessage(ts time.Time, st queue.Stats) []byte {
	b := head(make([]byte, 0, 96), TypeStats, ts)
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, st.Waiting, 10)
	b = append(b, `,"active":`...)
	b = strconv.AppendInt(b, st.Active, 10)
	b = append(b, `,"serving":`...)
	b = strconv.AppendInt(b, st.Serving, 10)
	return append(b, '}')
}

func admittedMessage(ts time.Time, tok string, t queue.Ticket, redirectURL string) []byte {
	b := head(make([]byte, 0, 200+len(tok)+len(redirectURL)), TypeAdmitted, ts)
	b = append(b, `,"admission_token":"`...)
	b = append(b, tok...) // base64url and dots: nothing to escape
	b = append(b, `","admitted_until":"`...)
	b = t.AdmittedUntil.UTC().AppendFormat(b, httpjson.TimeLayout)
	b = append(b, `","redirect_url":`...)
	if redirectURL == "" {
		b = append(b, "null"...)
	} else {
		q, _ := json.Marshal(redirectURL) // a string always encodes
		b = append(b, q...)
	}
	b = append(b, `,"number":`...)
	b = strconv.AppendInt(b, t.Number, 10)
	b = append(b, `,"serving":`...)
	b = strconv.AppendInt(b, t.Serving, 10)
	return append(b, '}')
}

// terminalType maps a terminal ticket status to its message type.
func terminalType(s queue.Status) string {
	switch s {
	case queue.StatusExpired:
		return TypeExpired
	case queue.StatusSoldOut:
		return TypeSoldOut
	case queue.StatusClosed:
		return TypeClosed
	case queue.StatusCompleted:
		return TypeCompleted
	}
	return TypeNotFound
}

// estimatePosition is a waiting ticket's position computed from the event's counters alone,
// without a store call: the tickets at places serving+1..place are ahead of it or it, less
// those that left (places are 1..LastNumber, see package queue). The store counts leavers only in total (LastNumber-Serving-Waiting), so
// they are taken as spread evenly over the numbers above serving. The result lies between
// the exact bounds: at least 1 and (number-serving) minus every leaver, at most number-serving
// and the number waiting.
func estimatePosition(place int64, st queue.Stats) int64 {
	ahead := place - st.Serving
	if ahead < 1 {
		return 0
	}
	span := st.LastNumber - st.Serving
	if span <= 0 || st.Waiting >= span {
		return ahead
	}
	left := span - st.Waiting
	p := int64(math.Ceil(float64(ahead) * float64(st.Waiting) / float64(span)))
	p = max(p, ahead-left, 1)
	return min(p, ahead, max(st.Waiting, 1))
}

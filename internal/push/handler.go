package push

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/wsframe"
)

// maxClientMessage is the largest message a client may send ({"type":"visible"} and the
// like), in bytes; a larger one closes the connection (1009).
const maxClientMessage = 256

// sseRetryMS is the reconnection delay an EventSource is told to use (ms).
const sseRetryMS = 2000

// An instance at its cap of push connections (Config.MaxConns) refuses a connect with 503
// too_many_connections and a Retry-After drawn from fullRetryMin..fullRetryMax (whole
// seconds), so that the pages and clients it turns away, which poll meanwhile, come back
// spread over that window rather than in one wave (issue 22: an overloaded fleet's reconnects
// arriving together made it worse). A person refused keeps their place: the ticket is in the
// store, and the poll tells them where they stand.
const (
	fullRetryMin = 10 * time.Second
	fullRetryMax = 30 * time.Second
)

// fullRetryAfter is the Retry-After of a connect refused at the cap: uniform in
// [fullRetryMin, fullRetryMax].
func fullRetryAfter() time.Duration {
	return fullRetryMin + rand.N(fullRetryMax-fullRetryMin+1)
}

// open checks the request's ticket and the limits, registers a connection for it and queues
// its first message, the ticket's current status. On failure it writes the problem (400
// invalid event id, 404 unknown ticket or event, 503 at the connection cap, while shutting
// down, or when the store is unreachable) and returns nil.
func (h *Hub) open(w http.ResponseWriter, r *http.Request, sse bool) *conn {
	eventID, ticketID, ref, ok := h.ticketOf(w, r)
	if !ok {
		return nil
	}
	if !sse {
		if p := handshakeProblem(w, r, h.cfg.OriginAllowed); p != nil {
			httpjson.WriteProblem(w, p)
			return nil
		}
	}
	if h.stopping.Load() {
		writeUnavailable(w, "shutting_down", "this instance is shutting down; connect again (another instance will answer)")
		return nil
	}
	// One deadline for the opening's store calls: a store that hangs costs the client
	// OpenTimeout, not one for each call.
	deadline := time.Now().Add(h.cfg.OpenTimeout)
	client, ok := h.takeClient(r, eventID, deadline)
	if !ok {
		httpjson.WriteProblem(w, httpjson.RateLimited(clientRetry,
			"this address holds its maximum of push connections here; poll GET /v1/events/"+eventID+"/tickets/{ticket_id} instead"))
		return nil
	}
	if n := h.conns.Add(1); n > int64(h.cfg.MaxConns) {
		h.conns.Add(-1)
		h.releaseClient(eventID, client, deadline)
		h.refusedFull.Add(1)
		p := httpjson.NewProblem(http.StatusServiceUnavailable, "too_many_connections",
			"this instance holds its maximum of "+strconv.Itoa(h.cfg.MaxConns)+" push connections; poll GET /v1/events/"+eventID+"/tickets/{ticket_id} meanwhile and connect again after Retry-After")
		p.RetryAfter = fullRetryAfter()
		httpjson.WriteProblem(w, p)
		return nil
	}
	c := &conn{
		hub: h, ref: ref, ticketID: ticketID, sse: sse, client: client,
		out: make(chan outMsg, h.cfg.SendBuffer), done: make(chan struct{}),
		pingAt: h.now(), // the first keep-alive is due a PingInterval after connecting
	}
	// Registered before the status read: a batch that passes the ticket after the read is
	// then delivered to it, and one that passed it before shows in the read.
	switch err := h.register(c); {
	case errors.Is(err, errTicketFull):
		h.conns.Add(-1)
		h.releaseClient(eventID, client, deadline)
		httpjson.WriteProblem(w, httpjson.NewProblem(http.StatusTooManyRequests, "too_many_ticket_connections",
			"this ticket has "+strconv.Itoa(h.cfg.MaxConnsPerTicket)+" push connections open here already; close one, or poll GET /v1/events/"+eventID+"/tickets/{ticket_id}"))
		return nil
	case err != nil:
		h.conns.Add(-1)
		h.releaseClient(eventID, client, deadline)
		writeUnavailable(w, "shutting_down", "this instance is shutting down; connect again (another instance will answer)")
		return nil
	}
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	t, err := h.store.Connect(ctx, ref) // counted as a poll: 429 past polls_per_ticket
	cancel()
	if err != nil {
		h.unregisterBy(c, deadline)
		h.storeFailed(w, r, err, eventID)
		return nil
	}
	h.apply(c, t, nil, time.Time{}, srcConnect)
	return c
}

// ticketOf reads the request's event id and ticket id (whose MAC must verify); on failure it
// writes the problem (400 invalid_event_id, 404 ticket_not_found) and returns false.
func (h *Hub) ticketOf(w http.ResponseWriter, r *http.Request) (eventID, ticketID string, ref queue.TicketRef, ok bool) {
	eventID = r.PathValue("event_id")
	if !event.ValidID(eventID) {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_event_id", "event ids match "+event.IDRule))
		return "", "", ref, false
	}
	ticketID = r.PathValue("ticket_id")
	ref, err := h.tickets.Decode(eventID, ticketID)
	if err != nil {
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "ticket_not_found", "no such ticket in event "+eventID))
		return "", "", ref, false
	}
	return eventID, ticketID, ref, true
}

// storeFailed answers a store call for r that failed with err (Config.StoreError), but for a
// call cancelled because r's client went away (a stream's request ends with its client): there
// is nobody to answer, and it is neither a store failure (logged, counted, a 503 in the access
// log and the event's history) nor the client's refusal.
func (h *Hub) storeFailed(w http.ResponseWriter, r *http.Request, err error, eventID string) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		return
	}
	h.cfg.StoreError(w, err, eventID)
}

func writeUnavailable(w http.ResponseWriter, code, detail string) {
	httpjson.WriteProblem(w, httpjson.NewProblem(http.StatusServiceUnavailable, code, detail))
}

// ServeWebSocket serves GET /v1/events/{event_id}/tickets/{ticket_id}/ws: a WebSocket whose
// first message is the ticket's current status, followed by its changes (see the message
// types). The client may send {"type":"visible"} and {"type":"hidden"} as the page's
// visibility changes; until it says "visible" an open socket does not renew an admitted
// session. Close codes: 1000 after a final status, 1012 when the instance shuts down
// (reconnect), 1008 for a client too slow to keep up, 1002, 1007 and 1009 for a client that
// breaks the protocol, sends text that is not UTF-8 or a message over 256 bytes. Errors before
// the upgrade are problems: 400 invalid_event_id, 404 ticket_not_found (an id that is not one
// of ours), then those of handshakeProblem (426, 400, 403), then 503 shutting_down or
// too_many_connections, 404 ticket_not_found (a ticket that left), 429 rate_limited (the
// opening counts as a read of the ticket against the event's polls_per_ticket).
//
// The handler returns once the connection is upgraded: the connection keeps one goroutine,
// its reader, and no buffers; the hub's shared writers send its messages (see wsconn.go).
func (h *Hub) ServeWebSocket(w http.ResponseWriter, r *http.Request) {
	c := h.open(w, r, false)
	if c == nil {
		return
	}
	wc, err := wsframe.Upgrade(w, r, c, h.wsOptions())
	if err != nil {
		h.unregister(c)
		return // the upgrade answered the request
	}
	h.wsServe(c, wc)
}

// ServeSSE serves GET /v1/events/{event_id}/tickets/{ticket_id}/events: the same messages as
// the WebSocket as Server-Sent Events, each with an "id:" and the JSON in "data:" (no "event:"
// field, so EventSource.onmessage sees them all), a "ping" event every HeartbeatInterval, and
// a "reconnect" message when the instance shuts down. A reconnecting EventSource sends
// Last-Event-ID: the stream then starts again with the ticket's current status, which
// supersedes anything it missed. The stream ends after a final status; the client should
// close its EventSource then. SSE connections never renew an admitted session (they cannot
// answer a ping): a page on SSE reads its ticket while visible instead, and the stream says
// expired once the session ends (see the package doc's Activity).
//
// HEAD (which the route's GET takes too) answers as GET would before its stream (400, 404 for
// an id that is not ours, a ticket that left or an event deleted, 503 when the store does not
// answer; else 200 and the stream's headers) and ends: no connection is registered or
// counted, and nothing is streamed.
func (h *Hub) ServeSSE(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		eventID, _, ref, ok := h.ticketOf(w, r)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.OpenTimeout)
		_, err := h.store.Connect(ctx, ref)
		cancel()
		if err != nil { // a ticket that left, an event deleted, past polls_per_ticket: as GET answers
			h.storeFailed(w, r, err, eventID)
			return
		}
		sseHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		return
	}
	c := h.open(w, r, true)
	if c == nil {
		return
	}
	defer h.unregister(c)
	defer connlimit.MarkPush(r.Context())() // its client's idle keep-alive connections go first
	s := &sseWriter{h: h, w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
	defer func() { _ = s.rc.SetWriteDeadline(time.Time{}) }() // the connection may serve more requests
	sseHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	s.resume(r.Header.Get("Last-Event-ID"))
	if s.write([]byte("retry: "+strconv.Itoa(sseRetryMS)+"\n\n")) != nil {
		return
	}
	h.streamSSE(r.Context(), c, s)
}

// maxSSEID bounds the ids of a stream (2^53: exact in a browser's numbers); a Last-Event-ID
// above it starts the stream's ids again from 1.
const maxSSEID = 1 << 53

// resume takes the last id a reconnecting EventSource saw: this stream's ids continue above
// it (even from another instance), and the stream starts again with the current status, which
// supersedes whatever was missed. Ids are per connection: a client's Last-Event-ID moves
// nobody else's.
func (s *sseWriter) resume(lastEventID string) {
	last, err := strconv.ParseUint(lastEventID, 10, 64)
	if err != nil || last >= maxSSEID {
		return
	}
	s.id = last
}

// streamSSE writes c's messages to s until the final status, c's end or the request's.
func (h *Hub) streamSSE(ctx context.Context, c *conn, s *sseWriter) {
	for {
		select {
		case m := <-c.out:
			var err error
			if m.comment {
				err = s.write(append(append([]byte("event: ping\ndata: "), simpleMessage(TypePing, h.now())...), "\n\n"...))
			} else {
				err = s.event(m.data)
			}
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && !c.dead() {
					h.droppedWrite.Add(1) // too slow to take the message; other errors: the client left
				}
				c.kill(reasonWrite)
				return
			}
			if m.last {
				return
			}
		case <-c.done:
			if c.reason == reasonShutdown {
				_ = s.event(simpleMessage(TypeReconnect, h.now()))
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// sseWriter writes one SSE response.
type sseWriter struct {
	h   *Hub
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte // an event being framed
	id  uint64 // the last id written
}

// write writes b and flushes it, within WriteTimeout.
func (s *sseWriter) write(b []byte) error {
	_ = s.rc.SetWriteDeadline(s.h.now().Add(s.h.cfg.WriteTimeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// event writes data as an event with the next id.
func (s *sseWriter) event(data []byte) error {
	s.buf = append(s.buf[:0], "id: "...)
	if s.id++; s.id > maxSSEID {
		s.id = 1
	}
	s.buf = strconv.AppendUint(s.buf, s.id, 10)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	return s.write(s.buf)
}

// sseHeaders sets the headers of an SSE stream.
func sseHeaders(hd http.Header) {
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // proxies: do not buffer the stream
}

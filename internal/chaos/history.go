package chaos

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// Exchange is one request a client sent and what came back, or one push message it received,
// stamped with the client's own clock. The invariant checkers read nothing else of the service.
type Exchange struct {
	// Kind is what the client did: join, status, leave, push (a WebSocket message; Sent is
	// zero), hold, book, entry, entry_status, event (a sample of the event's counters), probe.
	Kind   string
	Target int // index of the instance the request went to
	Sent   time.Time
	Recv   time.Time // zero when no answer came
	// Code is the HTTP status; 0 when no answer came (Failure says why).
	Code int
	// Failure is "timeout", "refused", "reset", "transport" or "cancelled" (the run stopped the
	// client) when no answer came, "decode" when a 2xx body did not decode.
	Failure string
	// Problem is the problem code of a 4xx/5xx answer.
	Problem string

	// A ticket answer (join, status) or push message.
	TicketID   string
	Generation uint32 // decoded from the ticket id
	Number     int64
	Status     string // ticket status; for a push message its type in upper case
	// A booking answer.
	BookingID string
	Seats     []string
	// A coupon entry answer.
	EntryStatus string
	CouponCode  string
	// An event sample.
	Active, MaxActive int64
}

// Answered reports whether an HTTP answer (or a push message) arrived.
func (x Exchange) Answered() bool { return x.Code != 0 }

// History is one client's record of everything it did, in its own order.
type History struct {
	Client    string // "line-3", "entrant-7", "sampler", "probe"
	User      string // the user id the client acts for ("" for samplers and probes)
	Event     string
	Camp      string
	Exchanges []Exchange
}

func (h *History) add(x Exchange) { h.Exchanges = append(h.Exchanges, x) }

// ticketRef decodes the generation and number a ticket id carries in clear (package token:
// base64url of generation (4 bytes) ‖ number (8 bytes) ‖ tag (16 bytes)). ok is false for
// anything else.
func ticketRef(id string) (gen uint32, number int64, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(raw) != 28 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(raw[:4]), int64(binary.BigEndian.Uint64(raw[4:12])), true
}

// requester sends the requests of one client and records them in its history.
type requester struct {
	client   *http.Client
	targets  []string
	adminKey string
	h        *History
}

type problemBody struct {
	Code string `json:"code"`
}

// do sends one request to target ti and records it. bearer "" sends none; body nil sends none;
// out (may be nil) receives a 2xx JSON body. The returned Exchange is the recorded one, so the
// caller may fill in more fields through fill before it is recorded.
func (r *requester) do(ctx context.Context, kind string, ti int, method, path, bearer string, hdr map[string]string, body any, out any, fill func(*Exchange)) Exchange {
	x := Exchange{Kind: kind, Target: ti}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.targets[ti]+path, rd)
	if err != nil {
		x.Failure = "transport"
		r.h.add(x)
		return x
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	x.Sent = time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		x.Failure = classify(ctx, err)
		r.h.add(x)
		return x
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	_ = resp.Body.Close()
	x.Recv = time.Now()
	x.Code = resp.StatusCode
	if err != nil && ctx.Err() != nil {
		x.Code, x.Failure = 0, "cancelled"
		r.h.add(x)
		return x
	}
	switch {
	case x.Code/100 == 2 && out != nil && len(raw) > 0:
		if err := json.Unmarshal(raw, out); err != nil {
			x.Failure = "decode"
		}
	case x.Code >= 400:
		var p problemBody
		_ = json.Unmarshal(raw, &p)
		x.Problem = p.Code
	}
	if fill != nil && x.Failure == "" {
		fill(&x)
	}
	r.h.add(x)
	return x
}

// classify names a request that got no answer.
func classify(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "cancelled"
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return "reset"
	}
	return "transport"
}

// newHTTPClient returns the client of one run: every request bounded by timeout, a keep-alive
// pool large enough for the crowd.
func newHTTPClient(timeout time.Duration, conns int) *http.Client {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

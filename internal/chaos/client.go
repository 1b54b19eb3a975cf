package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// The clients of a scenario. Each runs in one goroutine and writes only its own History. They
// behave like well-mannered users behind a load balancer: a request that gets no answer is
// sent again to the next instance, 503s and 5xx are retried with a back-off, and waiting
// tickets poll as poll_after_s says or hold a WebSocket.

// Problem and status spellings of the API (docs/api.md).
const (
	stQueued    = "QUEUED"
	stAdmitted  = "ADMITTED"
	stIssued    = "ISSUED"
	stRejected  = "REJECTED"
	pTicketGone = "ticket_not_found"
	pEntryGone  = "entry_not_found"
)

type ticketAnswer struct {
	TicketID       string  `json:"ticket_id"`
	Status         string  `json:"status"`
	Number         int64   `json:"number"`
	PollAfterS     float64 `json:"poll_after_s"`
	AdmissionToken string  `json:"admission_token"`
}

func fillTicket(t *ticketAnswer) func(*Exchange) {
	return func(x *Exchange) {
		x.TicketID, x.Status, x.Number = t.TicketID, t.Status, t.Number
		if g, n, ok := ticketRef(t.TicketID); ok {
			x.Generation = g
			if x.Number == 0 {
				x.Number = n
			}
		}
	}
}

// backoff is the wait after the n-th consecutive failure: 100 ms doubling to 2 s, jittered.
func backoff(rng *rand.Rand, n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 5)
	d = min(d, 2*time.Second)
	return d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryable: no answer, 429 or 5xx.
func retryable(x Exchange) bool {
	return x.Code == 0 && x.Failure != "cancelled" || x.Code == http.StatusTooManyRequests || x.Code >= 500
}

// lineUser joins the line as user (server to server, with the admin key, so that a retried join
// gets the same ticket back), waits (polling, or on the ticket's WebSocket or SSE stream), and once
// admitted holds 1-2 seats, books them and leaves.
type lineUser struct {
	r     requester
	rng   *rand.Rand
	event string
	seats []string
	push  int // pushNone, pushWS or pushSSE
	hold  time.Duration
	home  int
}

// rejoins is how many times a user whose ticket was lost (404) joins again, as a person told
// "join again" would.
const rejoins = 2

func (u *lineUser) run(ctx context.Context) {
	for range 1 + rejoins {
		if !u.once(ctx) || ctx.Err() != nil {
			return
		}
	}
}

// once joins and waits; it reports whether the ticket was lost (404), so that the user joins
// again.
func (u *lineUser) once(ctx context.Context) (lost bool) {
	ev := "/v1/events/" + url.PathEscape(u.event)
	ti := u.home
	var tk ticketAnswer
	// Join.
	for n := 0; ; n++ {
		tk = ticketAnswer{}
		x := u.r.do(ctx, "join", ti, http.MethodPost, ev+"/tickets", u.r.adminKey, nil,
			map[string]string{"user_id": u.r.h.User}, &tk, fillTicket(&tk))
		if x.Code == http.StatusOK || x.Code == http.StatusCreated {
			if x.Failure != "" {
				return false
			}
			break
		}
		if !retryable(x) || !sleepCtx(ctx, backoff(u.rng, n)) {
			return false
		}
		if x.Code == 0 {
			ti = (ti + 1) % len(u.r.targets)
		}
	}
	path := ev + "/tickets/" + url.PathEscape(tk.TicketID)
	pushed := false
	for fails := 0; ; {
		switch tk.Status {
		case stAdmitted:
			u.admitted(ctx, ev, path, ti, tk)
			return false
		case stQueued:
		default:
			return false // EXPIRED, CLOSED, SOLD_OUT, COMPLETED
		}
		if u.push != pushNone && !pushed {
			pushed = true // one socket per user; after it fails, poll
			if st, tok, ok := u.waitPush(ctx, ti, path, tk.TicketID); ok {
				if st != stAdmitted {
					return st == "NOT_FOUND"
				}
				tk.Status, tk.AdmissionToken = st, tok
				continue
			}
			if ctx.Err() != nil {
				return false
			}
		}
		wait := max(time.Duration(tk.PollAfterS*float64(time.Second)), 100*time.Millisecond)
		if fails > 0 {
			wait = backoff(u.rng, fails)
		}
		if !sleepCtx(ctx, wait) {
			return false
		}
		var next ticketAnswer
		x := u.r.do(ctx, "status", ti, http.MethodGet, path, "", nil, nil, &next, fillTicket(&next))
		switch {
		case x.Code == http.StatusOK && x.Failure == "":
			tk, fails = next, 0
		case retryable(x):
			fails++
			if x.Code == 0 {
				ti = (ti + 1) % len(u.r.targets)
			}
		case x.Code == http.StatusNotFound:
			return true // lost (the checker counts it): join again
		default:
			return false // 410, ...
		}
	}
}

// Push channels a line user waits on.
const (
	pushNone = iota // poll as poll_after_s says
	pushWS          // GET .../ws, a WebSocket
	pushSSE         // GET .../events, Server-Sent Events
)

// waitPush holds the ticket's push connection (WebSocket or SSE) and records every message
// that is not "keep waiting". It returns the final state (ADMITTED with its token, or another
// terminal type) with ok, or ok false when the connection failed or closed first (the caller
// polls).
func (u *lineUser) waitPush(ctx context.Context, ti int, path, ticketID string) (status, token string, ok bool) {
	x := Exchange{Kind: "push_open", Target: ti, Sent: time.Now()}
	var next func() ([]byte, error)
	if u.push == pushWS {
		dctx, cancel := context.WithTimeout(ctx, u.r.client.Timeout)
		ws, resp, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(u.r.targets[ti], "http")+path+"/ws",
			&websocket.DialOptions{HTTPClient: u.r.client})
		cancel()
		if err != nil {
			if resp != nil {
				x.Code, x.Recv = resp.StatusCode, time.Now()
			} else {
				x.Failure = classify(ctx, err)
			}
			u.r.h.add(x)
			return "", "", false
		}
		x.Code, x.Recv = http.StatusSwitchingProtocols, time.Now()
		defer ws.CloseNow()
		ws.SetReadLimit(1 << 20)
		next = func() ([]byte, error) { _, b, err := ws.Read(ctx); return b, err }
	} else {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req, err := http.NewRequestWithContext(sctx, http.MethodGet, u.r.targets[ti]+path+"/events", nil)
		if err != nil {
			return "", "", false
		}
		req.Header.Set("Accept", "text/event-stream")
		// The stream outlives the request timeout: the same pool, no overall timeout (the
		// transport's ResponseHeaderTimeout still bounds the wait for the headers).
		resp, err := (&http.Client{Transport: u.r.client.Transport}).Do(req)
		if err != nil {
			x.Failure = classify(ctx, err)
			u.r.h.add(x)
			return "", "", false
		}
		defer resp.Body.Close()
		x.Code, x.Recv = resp.StatusCode, time.Now()
		if resp.StatusCode != http.StatusOK {
			var p problemBody
			_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&p)
			x.Problem = p.Code
			u.r.h.add(x)
			return "", "", false
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		next = func() ([]byte, error) {
			var data []byte
			for sc.Scan() {
				line := sc.Bytes()
				switch {
				case len(line) == 0 && data != nil:
					return data, nil
				case bytes.HasPrefix(line, []byte("data:")):
					data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
				}
			}
			if err := sc.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
	}
	u.r.h.add(x)
	for {
		b, err := next()
		if err != nil {
			return "", "", false
		}
		var m struct {
			Type           string `json:"type"`
			AdmissionToken string `json:"admission_token"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m.Type {
		case "position", "stats", "ping", "pong":
			continue // only "keep waiting" (or the stream's heartbeat); not recorded, to keep histories small
		case "reconnect":
			return "", "", false // the instance shuts down: poll
		}
		px := Exchange{Kind: "push", Target: ti, Recv: time.Now(), Code: http.StatusOK,
			Status: strings.ToUpper(m.Type), TicketID: ticketID}
		if g, n, ok := ticketRef(ticketID); ok {
			px.Generation, px.Number = g, n
		}
		if m.Type == "not_found" {
			px.Code, px.Problem = http.StatusNotFound, pTicketGone
		}
		u.r.h.add(px)
		switch m.Type {
		case "admitted":
			return stAdmitted, m.AdmissionToken, true
		case "expired", "sold_out", "closed", "completed", "not_found":
			return px.Status, "", true
		}
	}
}

type holdAnswer struct {
	HoldID string `json:"hold_id"`
}

type bookingAnswer struct {
	BookingID string   `json:"booking_id"`
	Seats     []string `json:"seats"`
}

// admitted stays u.hold, holds 1-2 random seats, books them and leaves.
func (u *lineUser) admitted(ctx context.Context, ev, path string, ti int, tk ticketAnswer) {
	if !sleepCtx(ctx, u.hold) {
		return
	}
	tok := tk.AdmissionToken
	defer func() { // leave, booked or not (a booked ticket is COMPLETED: 204 or 404 both fine)
		if ctx.Err() == nil {
			for n := range 3 {
				x := u.r.do(ctx, "leave", ti, http.MethodDelete, path, "", nil, nil, nil, nil)
				if !retryable(x) || !sleepCtx(ctx, backoff(u.rng, n)) {
					return
				}
			}
		}
	}()
	if tok == "" {
		return
	}
	var hold holdAnswer
	for n := 0; n < 12; n++ {
		want := []string{u.seats[u.rng.IntN(len(u.seats))]}
		if u.rng.IntN(2) == 0 {
			if s := u.seats[u.rng.IntN(len(u.seats))]; s != want[0] {
				want = append(want, s)
			}
		}
		hold = holdAnswer{}
		x := u.r.do(ctx, "hold", ti, http.MethodPost, ev+"/holds", tok, nil, map[string]any{"seats": want}, &hold, nil)
		if x.Code == http.StatusCreated && x.Failure == "" {
			break
		}
		hold.HoldID = ""
		if x.Code == http.StatusConflict || retryable(x) {
			if x.Code == 0 {
				ti = (ti + 1) % len(u.r.targets)
			}
			if !sleepCtx(ctx, backoff(u.rng, n)) {
				return
			}
			continue
		}
		return // 410 sold out, 401 session over, ...
	}
	if hold.HoldID == "" {
		return
	}
	key := fmt.Sprintf("%s-%s", u.r.h.User, hold.HoldID)
	for n := 0; n < 12; n++ {
		var bk bookingAnswer
		x := u.r.do(ctx, "book", ti, http.MethodPost, ev+"/bookings", tok, map[string]string{"Idempotency-Key": key},
			map[string]string{"hold_id": hold.HoldID}, &bk, func(x *Exchange) { x.BookingID, x.Seats = bk.BookingID, bk.Seats })
		if (x.Code == http.StatusCreated || x.Code == http.StatusOK) && x.Failure == "" {
			return
		}
		if !retryable(x) || !sleepCtx(ctx, backoff(u.rng, n)) {
			return
		}
		if x.Code == 0 {
			ti = (ti + 1) % len(u.r.targets)
		}
	}
}

type entryAnswer struct {
	UserID     string `json:"user_id"`
	Status     string `json:"status"`
	CouponCode string `json:"coupon_code"`
}

// entrant enters a coupon campaign as its user (admin key and user_id) and polls its entry until
// it is ISSUED or REJECTED, recording every code it is shown.
type entrant struct {
	r     requester
	rng   *rand.Rand
	camp  string
	home  int
	every time.Duration
	// final is closed once the scenario's fault is over and the service recovered: every
	// entrant then reads its entry once more, so that an entry or a code lost or changed by the
	// fault after the entrant saw it shows in its history.
	final <-chan struct{}
}

func (e *entrant) run(ctx context.Context) {
	if e.enter(ctx) {
		e.enter(ctx) // told "not found": enter again once, as a person would
	}
	select {
	case <-e.final:
	case <-ctx.Done():
		return
	}
	path := "/v1/campaigns/" + url.PathEscape(e.camp) + "/entries/" + url.PathEscape(e.r.h.User)
	for n := range 5 {
		var a entryAnswer
		x := e.r.do(ctx, "entry_status", e.home, http.MethodGet, path, e.r.adminKey, nil, nil, &a, fillEntry(&a))
		if x.Code == http.StatusNotFound {
			e.enter(ctx) // lost since (the checker counts it): enter again once
			return
		}
		if !retryable(x) || !sleepCtx(ctx, backoff(e.rng, n)) {
			return
		}
	}
}

// enter enters the campaign and polls the entry until it is ISSUED or REJECTED. It reports
// whether the entry was answered 404 (lost).
func (e *entrant) enter(ctx context.Context) (lost bool) {
	base := "/v1/campaigns/" + url.PathEscape(e.camp) + "/entries"
	ti := e.home
	for n := 0; ; n++ {
		var a entryAnswer
		x := e.r.do(ctx, "entry", ti, http.MethodPost, base, e.r.adminKey, nil,
			map[string]string{"user_id": e.r.h.User}, &a, fillEntry(&a))
		if x.Code/100 == 2 && x.Failure == "" {
			if a.Status == stIssued || a.Status == stRejected {
				return false
			}
			break
		}
		if !retryable(x) || !sleepCtx(ctx, backoff(e.rng, n)) {
			return false
		}
		if x.Code == 0 {
			ti = (ti + 1) % len(e.r.targets)
		}
	}
	path := base + "/" + url.PathEscape(e.r.h.User)
	for fails := 0; ; {
		wait := e.every
		if fails > 0 {
			wait = backoff(e.rng, fails)
		}
		if !sleepCtx(ctx, wait) {
			return false
		}
		var a entryAnswer
		x := e.r.do(ctx, "entry_status", ti, http.MethodGet, path, e.r.adminKey, nil, nil, &a, fillEntry(&a))
		switch {
		case x.Code == http.StatusOK && x.Failure == "":
			fails = 0
			if a.Status == stIssued || a.Status == stRejected {
				return false
			}
		case retryable(x):
			fails++
			if x.Code == 0 {
				ti = (ti + 1) % len(e.r.targets)
			}
		case x.Code == http.StatusNotFound:
			return true
		default:
			return false
		}
	}
}

func fillEntry(a *entryAnswer) func(*Exchange) {
	return func(x *Exchange) { x.EntryStatus, x.CouponCode = a.Status, a.CouponCode }
}

// sampler reads the event's counters every period, round robin over the instances.
func sampler(ctx context.Context, r requester, event string, every time.Duration) {
	path := "/v1/events/" + url.PathEscape(event)
	for i := 0; ; i++ {
		var a struct {
			Active    int64 `json:"active"`
			MaxActive int64 `json:"max_active"`
		}
		r.do(ctx, "event", i%len(r.targets), http.MethodGet, path, "", nil, nil, &a,
			func(x *Exchange) { x.Active, x.MaxActive = a.Active, a.MaxActive })
		if !sleepCtx(ctx, every) {
			return
		}
	}
}

// probeRound sends one round of the requests every client makes to every instance: a join (on
// the probe event), its status, its leave, a coupon entry and its status (on the probe
// campaign), and a read of the scenario's event. It reports whether every answer was the
// success it should be.
func probeRound(ctx context.Context, r requester, probeEvent, probeCamp, event string, round int) bool {
	ok := true
	for ti := range r.targets {
		user := fmt.Sprintf("probe-%d-%d", round, ti)
		var tk ticketAnswer
		x := r.do(ctx, "probe", ti, http.MethodPost, "/v1/events/"+probeEvent+"/tickets", r.adminKey, nil,
			map[string]string{"user_id": user}, &tk, nil)
		if x.Code/100 != 2 || x.Failure != "" {
			ok = false
			continue
		}
		tp := "/v1/events/" + probeEvent + "/tickets/" + url.PathEscape(tk.TicketID)
		if x := r.do(ctx, "probe", ti, http.MethodGet, tp, "", nil, nil, nil, nil); x.Code != http.StatusOK {
			ok = false
		}
		if x := r.do(ctx, "probe", ti, http.MethodDelete, tp, "", nil, nil, nil, nil); x.Code/100 != 2 {
			ok = false
		}
		cp := "/v1/campaigns/" + probeCamp + "/entries"
		if x := r.do(ctx, "probe", ti, http.MethodPost, cp, r.adminKey, nil, map[string]string{"user_id": user}, nil, nil); x.Code/100 != 2 {
			ok = false
		}
		if x := r.do(ctx, "probe", ti, http.MethodGet, cp+"/"+user, r.adminKey, nil, nil, nil, nil); x.Code != http.StatusOK {
			ok = false
		}
		if x := r.do(ctx, "probe", ti, http.MethodGet, "/v1/events/"+url.PathEscape(event), "", nil, nil, nil, nil); x.Code != http.StatusOK {
			ok = false
		}
	}
	return ok
}

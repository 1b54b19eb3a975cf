package crowd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Book mode (--book): every admitted user looks at the seat map, holds 1-4 random available
// seats (POST .../holds with its admission token), picks others after a 409 (the problem lists
// the seats taken), and books (POST .../bookings with an Idempotency-Key, retried with the same
// key after a 5xx or a transport error). Everything a client saw is checked at the end against
// a final GET of the event and of its seats:
//
//   - double_booked: seats that two successful bookings both claimed, plus seats the clients
//     booked that the server does not show sold;
//   - oversold: seats booked (by the clients' count, or the server's) beyond the capacity.
//
// Both must be 0. The sell-out time runs from the first join sent to the booking that sold the
// last seat (by the clients' count).

// BookReport is what the --book users saw.
type BookReport struct {
	Capacity int64 `json:"capacity"`
	// Bookings counts successful bookings; SeatsBooked the seats in them.
	Bookings    int64 `json:"bookings"`
	SeatsBooked int64 `json:"seats_booked"`
	// Holds counts successful holds; HoldConflicts the 409s that made users pick again.
	Holds         int64 `json:"holds"`
	HoldConflicts int64 `json:"hold_conflicts"`
	// SoldOutSeen counts users told sold_out (410) while holding or booking.
	SoldOutSeen int64 `json:"sold_out_seen"`
	// GaveUp counts admitted users that ended without a booking (retries exhausted, sold out).
	GaveUp int64 `json:"gave_up"`
	// Oversold and DoubleBooked must be 0 (see the package comment of book.go).
	Oversold     int64 `json:"oversold"`
	DoubleBooked int64 `json:"double_booked"`
	// ServerSold is the final GET's sold count; ServerSoldOut its sold_out.
	ServerSold    int64 `json:"server_sold"`
	ServerSoldOut bool  `json:"server_sold_out"`
	// SellOutS is the time from the first join to the booking of the last seat (0: not sold out).
	SellOutS float64 `json:"sell_out_s"`
	// BookLatencyMS covers the booking requests.
	BookLatencyMS Latency `json:"book_latency_ms"`
}

// maxSeatsBody bounds a GET /seats answer.
const maxSeatsBody = 16 << 20

type booker struct {
	r     *runner
	sem   chan struct{} // bounds the booking requests in flight (as Concurrency does the others)
	seats []string      // every seat of the event
	cap   int64

	holds, conflicts, soldOutSeen, gaveUp, bookings atomic.Int64
	seatsBooked                                     atomic.Int64
	soldOutAt                                       atomic.Int64 // unix ns
	latency                                         *histogram

	mu    sync.Mutex
	owner map[string]string // seat -> booking id, as the clients saw
	dup   int64

	// The seat map the users look at: one snapshot shared by all, refreshed by one user at a
	// time at most every seatMapAge (as a page's seat map would be served from a short cache),
	// so that thousands of users do not each download every seat's state.
	snapMu      sync.Mutex
	snapTaken   map[string]bool
	snapSoldOut bool
	snapAt      time.Time
	refreshing  bool
}

// seatMapAge is how old the shared seat map may get before a user refreshes it.
const seatMapAge = 250 * time.Millisecond

// view returns the shared seat map (read-only), refreshing it first when it is stale and no
// other user is refreshing it.
func (b *booker) view(ctx context.Context, base string) (taken map[string]bool, soldOut bool) {
	b.snapMu.Lock()
	if time.Since(b.snapAt) < seatMapAge || b.refreshing {
		defer b.snapMu.Unlock()
		return b.snapTaken, b.snapSoldOut
	}
	b.refreshing = true
	b.snapMu.Unlock()
	var sa seatsAnswer
	code, err := b.call(ctx, http.MethodGet, base+"/seats", "", nil, &sa, nil)
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	b.refreshing = false
	if err == nil && code == http.StatusOK {
		t := make(map[string]bool, len(sa.Seats))
		for s, st := range sa.Seats {
			if st != "available" {
				t[s] = true
			}
		}
		b.snapTaken, b.snapSoldOut, b.snapAt = t, sa.SoldOut, time.Now()
	}
	return b.snapTaken, b.snapSoldOut
}

type seatsAnswer struct {
	Capacity int64             `json:"capacity"`
	Sold     int64             `json:"sold"`
	SoldOut  bool              `json:"sold_out"`
	Seats    map[string]string `json:"seats"`
}

// seatList is "S-0001".."S-n", the seats of an event the run creates.
func seatList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("S-%04d", i+1)
	}
	return out
}

// bookSeats is the seat list of an event the run creates: nil (omitted) without Book.
func bookSeats(cfg Config) []string {
	if !cfg.Book {
		return nil
	}
	if cfg.Seats <= 0 {
		return seatList(5000)
	}
	return seatList(cfg.Seats)
}

// setupBook reads the seat map of the event (which must sell seats).
func (r *runner) setupBook(ctx context.Context, out io.Writer) error {
	b := &booker{r: r, sem: make(chan struct{}, r.cfg.Concurrency), owner: map[string]string{},
		latency: newHistogram(int64(time.Hour / time.Microsecond))}
	var sa seatsAnswer
	code, err := b.call(ctx, http.MethodGet, r.cfg.Targets[0]+"/v1/events/"+r.eventPath+"/seats", "", nil, &sa, nil)
	if err != nil {
		return fmt.Errorf("book: seats of %q: %w", r.cfg.Event, err)
	}
	if code != http.StatusOK || len(sa.Seats) == 0 {
		return fmt.Errorf("book: GET seats of %q answered %d with %d seats (does the event sell seats?)", r.cfg.Event, code, len(sa.Seats))
	}
	for s := range sa.Seats {
		b.seats = append(b.seats, s)
	}
	b.cap = sa.Capacity
	r.book = b
	fmt.Fprintf(out, "crowd: book mode: %d seats, %d sold before the run\n", len(b.seats), sa.Sold)
	return nil
}

// call sends one request of the book mode and decodes a 2xx body into v, a 4xx/5xx problem into
// p. code is 0 for a transport error (err is then nil unless ctx ended).
func (b *booker) call(ctx context.Context, method, u, bearer string, body any, v any, p *bookProblem) (int, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-b.sem }()
	req, err := newJSONRequest(ctx, method, u, bearer, body)
	if err != nil {
		return 0, err
	}
	if k, ok := body.(idempotent); ok {
		req.Header.Set("Idempotency-Key", k.key)
		raw, _ := json.Marshal(map[string]string{"hold_id": k.holdID})
		req.Body = io.NopCloser(bytes.NewReader(raw))
		req.ContentLength = int64(len(raw))
	}
	b.r.requests.Add(1)
	resp, err := b.r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		b.r.addError(errTransport)
		return 0, nil
	}
	defer drain(resp.Body)
	switch {
	case resp.StatusCode/100 == 2 && v != nil:
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxSeatsBody)).Decode(v); err != nil {
			b.r.addError(errDecode)
			return -1, nil
		}
	case resp.StatusCode >= 400 && p != nil:
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(p)
	}
	if resp.StatusCode >= 500 {
		b.r.addError(strconv.Itoa(resp.StatusCode))
	}
	return resp.StatusCode, nil
}

// idempotent is a booking body sent with its Idempotency-Key.
type idempotent struct{ key, holdID string }

type bookProblem struct {
	Code      string   `json:"code"`
	Detail    string   `json:"detail"`
	Conflicts []string `json:"conflicts"`
}

type holdAnswer struct {
	HoldID string   `json:"hold_id"`
	Seats  []string `json:"seats"`
}

type bookingAnswer struct {
	BookingID string   `json:"booking_id"`
	Seats     []string `json:"seats"`
}

// bookUser is an admitted user of the book mode: fetch a token, hold seats, book.
func (r *runner) bookUser(c *call, ticketURL string, user int) outcome {
	b := r.book
	ctx := c.ctx
	// A fresh admission token (and the seat map) as a page would fetch them.
	var tk ticket
	for attempt := 0; ; attempt++ {
		code, err := b.call(ctx, http.MethodGet, ticketURL, "", nil, &tk, nil)
		if err != nil {
			return outAdmitted
		}
		if code == http.StatusOK && tk.AdmissionToken != "" {
			break
		}
		if (code != 0 && code < 500) || attempt >= 5 || !sleep(ctx, r.backoff(attempt)) {
			b.gaveUp.Add(1)
			return outAdmitted
		}
	}
	base := r.cfg.Targets[c.target] + "/v1/events/" + r.eventPath
	rng := rand.New(rand.NewPCG(uint64(user), uint64(time.Now().UnixNano())))
	own := map[string]bool{} // seats this user was told are taken since
	for attempt := 0; attempt < 30; attempt++ {
		snap, soldOut := b.view(ctx, base)
		if soldOut {
			b.soldOutSeen.Add(1)
			b.gaveUp.Add(1)
			return outAdmitted
		}
		taken := func(s string) bool { return snap[s] || own[s] }
		want := b.pick(rng, taken, len(b.seats)-len(snap)-len(own), 1+rng.IntN(4))
		if len(want) == 0 {
			if attempt >= 3 {
				b.gaveUp.Add(1)
				return outAdmitted
			}
			clear(own)
			if !sleep(ctx, seatMapAge) {
				return outAdmitted
			}
			continue
		}
		var h holdAnswer
		var p bookProblem
		code, err := b.call(ctx, http.MethodPost, base+"/holds", tk.AdmissionToken, map[string]any{"seats": want}, &h, &p)
		switch {
		case err != nil:
			return outAdmitted
		case code == http.StatusCreated:
			b.holds.Add(1)
			if b.confirm(c, base, tk.AdmissionToken, h, user) {
				return outAdmitted
			}
			b.gaveUp.Add(1)
			return outAdmitted
		case code == http.StatusConflict:
			b.conflicts.Add(1)
			for _, s := range p.Conflicts {
				own[s] = true
			}
		case code == http.StatusGone:
			b.soldOutSeen.Add(1)
			b.gaveUp.Add(1)
			return outAdmitted
		case code == 0 || code >= 500 || code == http.StatusTooManyRequests:
			if !sleep(ctx, r.backoff(attempt)) {
				return outAdmitted
			}
		default:
			r.addError("hold_" + strconv.Itoa(code) + "_" + p.Code)
			b.gaveUp.Add(1)
			return outFailed
		}
	}
	b.gaveUp.Add(1)
	return outAdmitted
}

// pick chooses up to n distinct seats not known to be taken (about free of them are not).
func (b *booker) pick(rng *rand.Rand, taken func(string) bool, free, n int) []string {
	if free <= 0 {
		free = 1 // the estimate may be off: scan below
	}
	n = min(n, free)
	out := make([]string, 0, n)
	in := map[string]bool{}
	for tries := 0; len(out) < n && tries < 50*n; tries++ {
		s := b.seats[rng.IntN(len(b.seats))]
		if !taken(s) && !in[s] {
			in[s] = true
			out = append(out, s)
		}
	}
	if len(out) < n { // few seats left: scan
		for _, s := range b.seats {
			if len(out) == n {
				break
			}
			if !taken(s) && !in[s] {
				in[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// confirm books hold h, retrying transient failures with the same Idempotency-Key.
func (b *booker) confirm(c *call, base, tok string, h holdAnswer, user int) bool {
	key := fmt.Sprintf("%s-%d-%s", b.r.cfg.UserPrefix, user, h.HoldID)
	for attempt := 0; attempt < 8; attempt++ {
		var bk bookingAnswer
		var p bookProblem
		start := time.Now()
		b.r.endSession(c) // the booking ends the session (counted until it is sent: endSession)
		code, err := b.call(c.ctx, http.MethodPost, base+"/bookings", tok, idempotent{key: key, holdID: h.HoldID}, &bk, &p)
		if err != nil {
			return false
		}
		if code > 0 {
			b.latency.record(time.Since(start).Microseconds())
		}
		switch {
		case code == http.StatusCreated || code == http.StatusOK:
			b.record(bk)
			return true
		case code == http.StatusGone && p.Code == "sold_out":
			b.soldOutSeen.Add(1)
			return false
		case code == 0 || code >= 500 || code == http.StatusTooManyRequests:
			if !sleep(c.ctx, b.r.backoff(attempt)) {
				return false
			}
		default:
			b.r.addError("book_" + strconv.Itoa(code) + "_" + p.Code)
			return false
		}
	}
	return false
}

// record notes a successful booking as the client saw it.
func (b *booker) record(bk bookingAnswer) {
	b.mu.Lock()
	for _, s := range bk.Seats {
		if prev, ok := b.owner[s]; ok && prev != bk.BookingID {
			b.dup++
		}
		b.owner[s] = bk.BookingID
	}
	b.mu.Unlock()
	b.bookings.Add(1)
	if b.seatsBooked.Add(int64(len(bk.Seats))) >= b.cap {
		b.soldOutAt.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// report compares what the clients saw with a final read of the event and its seats.
func (b *booker) report(start time.Time) *BookReport {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep := &BookReport{Capacity: b.cap, Bookings: b.bookings.Load(), SeatsBooked: b.seatsBooked.Load(),
		Holds: b.holds.Load(), HoldConflicts: b.conflicts.Load(), SoldOutSeen: b.soldOutSeen.Load(),
		GaveUp: b.gaveUp.Load(), BookLatencyMS: b.latency.latency()}
	if at := b.soldOutAt.Load(); at != 0 {
		rep.SellOutS = time.Unix(0, at).Sub(start).Seconds()
	}
	b.mu.Lock()
	rep.DoubleBooked = b.dup
	booked := int64(len(b.owner))
	var view seatsAnswer
	code, err := b.call(ctx, http.MethodGet, b.r.cfg.Targets[0]+"/v1/events/"+url.PathEscape(b.r.cfg.Event)+"/seats", "", nil, &view, nil)
	if err == nil && code == http.StatusOK {
		rep.ServerSold, rep.ServerSoldOut = view.Sold, view.SoldOut
		for s := range b.owner {
			if view.Seats[s] != "sold" {
				rep.DoubleBooked++ // the client holds a booking the server does not show
			}
		}
	}
	b.mu.Unlock()
	rep.Oversold = max(0, booked-b.cap, rep.ServerSold-b.cap, rep.SeatsBooked-b.cap-b.dup)
	return rep
}

func (rep *BookReport) problems() []string {
	var p []string
	if rep.Oversold > 0 {
		p = append(p, fmt.Sprintf("%d seats oversold", rep.Oversold))
	}
	if rep.DoubleBooked > 0 {
		p = append(p, fmt.Sprintf("%d seats double booked", rep.DoubleBooked))
	}
	return p
}

func (rep *BookReport) writeSummary(w io.Writer) {
	sellOut := "not sold out"
	if rep.SellOutS > 0 {
		sellOut = fmt.Sprintf("sold out after %.2fs", rep.SellOutS)
	}
	fmt.Fprintf(w, "  book        %d bookings, %d of %d seats (%s); server sold %d, sold_out %v\n",
		rep.Bookings, rep.SeatsBooked, rep.Capacity, sellOut, rep.ServerSold, rep.ServerSoldOut)
	fmt.Fprintf(w, "              holds %d, conflicts %d, sold_out seen %d, gave up %d; booking latency p50 %s p99 %s max %s\n",
		rep.Holds, rep.HoldConflicts, rep.SoldOutSeen, rep.GaveUp, ms(rep.BookLatencyMS.P50), ms(rep.BookLatencyMS.P99), ms(rep.BookLatencyMS.Max))
	fmt.Fprintf(w, "              oversold %d, double_booked %d\n", rep.Oversold, rep.DoubleBooked)
}

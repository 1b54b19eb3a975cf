package crowd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/event"
)

// Bots (--bots N --bot-mode MODE): hostile clients released alongside the users, to show what
// the server's limits per client leave them and what they cost the real users. Each bot is one
// client to the server: it binds its own source address (--bot-addrs; bot i takes the plan's
// address i mod its size, so a /32 puts every bot on one address) and runs Concurrency workers
// at full speed — no pause between requests, only what the mode needs to wait for. A bot's
// requests go round the targets, so that a limit that were counted per instance would show.
//
// Modes:
//
//   - stuff: join as fast as possible, anonymously, without Idempotency-Key: each join that
//     gets through is a new ticket. A 429 is ignored (the next join goes at once).
//   - squat: take tickets (a 429 on a join is waited out: Retry-After) and poll them round
//     and round without pause, so that every ticket admitted stays claimed and its session
//     alive for as long as the run lasts; it never leaves. slots_held counts its admitted
//     sessions.
//   - connections: open as many push connections (WebSockets) as the server accepts, on
//     tickets it takes as it needs them (a ticket at its cap of connections is not used
//     again), and keep them open until the end.
//   - hoard: buy as many units as possible: join, poll without pause until admitted, hold
//     max_per_booking units (general admission) or as many random seats, book, and join again.
//
// On an event with a proof-of-work challenge, every join of a bot first fetches a challenge and
// solves it (challenge.Solve, on the worker's goroutine), as a user does.
//
// The bots run until the last user is done (or the deadline). Their report (BotReport) sets
// what they got beside what the event's limits allow them (see BotReport.Allowed).

// BotMode is what the bots do (see above).
type BotMode string

// Bot modes.
const (
	BotStuff       BotMode = "stuff"
	BotSquat       BotMode = "squat"
	BotConnections BotMode = "connections"
	BotHoard       BotMode = "hoard"
)

var botModes = []BotMode{BotStuff, BotSquat, BotConnections, BotHoard}

// BotConfig describes the bots of a run. The zero value runs none.
type BotConfig struct {
	// N is the number of bots (0 = none).
	N int
	// Mode is what they do. Required with N > 0.
	Mode BotMode
	// Addrs is the range of the bots' source addresses: bot i binds address i mod its size.
	// The zero Prefix lets the system choose (then the server tells the bots from the users
	// only if the users have addresses of their own: Config.UserAddrs).
	Addrs netip.Prefix
	// Concurrency is each bot's workers, hence requests in flight. Defaults to 8.
	Concurrency int
}

// DefaultBotConcurrency is BotConfig.Concurrency's default.
const DefaultBotConcurrency = 8

// botMaxBackoff bounds the pause after a transport error (a full-speed bot must not spin on
// a refused connection) and after a 429 that the mode waits out.
const botMaxBackoff = 5 * time.Second

func (c BotConfig) withDefaults() BotConfig {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultBotConcurrency)
	return c
}

func (c BotConfig) validate() error {
	switch {
	case c.N < 0:
		return fmt.Errorf("bots must not be negative")
	case c.N == 0:
		return nil
	case !slices.Contains(botModes, c.Mode):
		return fmt.Errorf("bot-mode must be one of stuff, squat, connections, hoard (got %q)", c.Mode)
	case c.Concurrency < 1:
		return fmt.Errorf("bot-concurrency must be at least 1")
	}
	return nil
}

// BotReport is what the bots got.
type BotReport struct {
	Bots int     `json:"bots"`
	Mode BotMode `json:"mode"`
	// Addresses is the number of distinct source addresses the bots used (0: the system's).
	Addresses int `json:"addresses"`
	// DurationS is how long the bots ran.
	DurationS float64 `json:"duration_s"`
	// Requests counts their HTTP requests and WebSocket upgrades.
	Requests int64 `json:"requests"`
	// ChallengesSolved counts the proofs of work the bots solved (an event with a "pow"
	// challenge: one per join, used or not).
	ChallengesSolved int64 `json:"challenges_solved"`
	// Tickets counts the new tickets they got (joins answered 201).
	Tickets int64 `json:"tickets"`
	// Admitted counts their tickets seen ADMITTED (at the join or by a poll).
	Admitted int64 `json:"admitted"`
	// SlotsHeld is the most admitted sessions the bots held at once, as their own answers
	// showed them (squat); SlotsHeldEnd the number at the end.
	SlotsHeld    int64 `json:"slots_held"`
	SlotsHeldEnd int64 `json:"slots_held_end"`
	// MaxPollsPerTicket is the most polls of one ticket answered 200 within one poll window
	// (limits.poll_window_s, windows aligned as the server's). Only polls sent and answered
	// within one window count: one whose request and answer straddle a window's end may have
	// been counted by the server in either window, so a figure over the limit proves that
	// the server let more through than the limit allows.
	MaxPollsPerTicket int64 `json:"max_polls_per_ticket"`
	// ConnsOpened counts push connections opened; Conns is the most open at once.
	ConnsOpened int64 `json:"conns_opened"`
	Conns       int64 `json:"conns"`
	// Bookings and UnitsBought count the hoard's bookings and the units (seats) in them.
	Bookings    int64 `json:"bookings"`
	UnitsBought int64 `json:"units_bought"`
	// RateLimited counts 429 answers; Limited splits them by what was refused: join, poll,
	// push (push_per_client), push_ticket (a ticket's connections), hold, book.
	RateLimited int64            `json:"rate_limited"`
	Limited     map[string]int64 `json:"limited"`
	// Errors counts other failures by "<kind>_<status>" (transport errors: status
	// "transport").
	Errors map[string]int64 `json:"errors"`
	// Limits are the event's limits per client as the first target reported them.
	Limits BotLimits `json:"limits"`
	// Allowed is the most the limits allow the bots (see BotAllowed); Over lists what they
	// got beyond it (empty: the limits held).
	Allowed BotAllowed `json:"allowed"`
	Over    []string   `json:"over"`
}

// BotLimits are the event's limits (GET /v1/events/{id}: limits, max_per_booking).
type BotLimits struct {
	JoinsPerClient int64 `json:"joins_per_client"`
	JoinWindowS    int64 `json:"join_window_s"`
	PushPerClient  int64 `json:"push_per_client"`
	PollsPerTicket int64 `json:"polls_per_ticket"`
	PollWindowS    int64 `json:"poll_window_s"`
	MaxPerBooking  int64 `json:"max_per_booking"`
}

// BotAllowed is what the limits allow the bots during their run, counted per address:
//
//   - Tickets: per address, joins_per_client plus joins_per_client per join_window_s of the
//     run (the client's bucket of joins: full at the start, refilled at that rate);
//   - Conns: push_per_client per address, whatever the number of instances;
//   - PollsPerTicket: polls_per_ticket per ticket per poll window, and with several
//     targets (distinct URLs), for each target but one, the most polls of one ticket the
//     bots had answered within a quarter of a second (a ticket waiting far back is read from
//     each instance's view of the line, and its polls count on the other instances within
//     250 ms);
//   - SlotsHeld: one per ticket; UnitsBought: max_per_booking per ticket.
type BotAllowed struct {
	Tickets        int64 `json:"tickets"`
	Conns          int64 `json:"conns"`
	PollsPerTicket int64 `json:"polls_per_ticket"`
	SlotsHeld      int64 `json:"slots_held"`
	UnitsBought    int64 `json:"units_bought"`
}

// eventExtras are the fields of an event the run creates that depend on who runs: with every
// user on the system's one address and no bots, the limits per client are lifted (that one
// client would be far over them; they stay checked on every request, at the same cost); the
// hoard needs units to buy: without --book (seats) the event sells Seats units of general
// admission.
func eventExtras(cfg Config) map[string]any {
	out := map[string]any{}
	if !cfg.UserAddrs.IsValid() && cfg.Bots.N == 0 {
		out["limits"] = map[string]int64{"joins_per_client": event.MaxLimit, "push_per_client": event.MaxLimit,
			"polls_per_ticket": event.MaxLimit} // --poll-scale may poll faster than poll_after_s
	}
	if cfg.Bots.N > 0 && cfg.Bots.Mode == BotHoard && !cfg.Book {
		n := cfg.Seats
		if n <= 0 {
			n = 5000 // Config.Seats's default
		}
		out["capacity"] = n
	}
	return out
}

// botFleet is the shared state of the bots of one run.
type botFleet struct {
	r     *runner
	cfg   BotConfig
	plan  *addrPlan
	lim   BotLimits
	seats []string // the event's seats (hoard on a seated event); nil: general admission
	pow   bool     // every join needs a solved proof of work (proof)

	requests, tickets, admitted, held, heldMax atomic.Int64
	opened, open, openMax, bookings, units     atomic.Int64
	limited429, maxPolls, maxBurst, solved     atomic.Int64

	conns sync.WaitGroup // the readers of open push connections

	mu      sync.Mutex
	limited map[string]int64
	errors  map[string]int64
}

// holds reports whether the mode tracks its admitted sessions (it polls its tickets).
func (f *botFleet) holds() bool { return f.cfg.Mode == BotSquat || f.cfg.Mode == BotHoard }

// botEventInfo is the part of GET /v1/events/{id} the bots read.
type botEventInfo struct {
	Limits    *BotLimits `json:"limits"`
	Challenge *struct {
		Type string `json:"type"`
	} `json:"challenge"`
	MaxPerBooking int64    `json:"max_per_booking"`
	Seats         []string `json:"seats"`
	SeatMap       *struct {
		Rows   []string `json:"rows"`
		PerRow int      `json:"per_row"`
	} `json:"seat_map"`
}

// startBots releases the bots on ctx; the returned function stops them and returns their
// report (nil without bots).
func (r *runner) startBots(ctx context.Context) (stop func() *BotReport, err error) {
	cfg := r.cfg.Bots
	if cfg.N == 0 {
		return func() *BotReport { return nil }, nil
	}
	f := &botFleet{r: r, cfg: cfg, limited: map[string]int64{}, errors: map[string]int64{},
		plan: newAddrPlan(cfg.Addrs, cfg.N*cfg.Concurrency, cfg.N, r.cfg.RequestTimeout)}
	if err := f.readEvent(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for b := range cfg.N {
		client := f.plan.client(b)
		if client == nil {
			client = r.client
		}
		bt := &bot{f: f, id: b, client: client, tickets: &botTickets{}}
		for w := range cfg.Concurrency {
			wg.Go(func() { bt.work(ctx, w) })
		}
	}
	return func() *BotReport {
		cancel()
		wg.Wait()
		f.conns.Wait()
		end := time.Now()
		f.plan.closeIdle()
		return f.report(start, end)
	}, nil
}

// readEvent reads the event's limits (and seats, for the hoard).
func (f *botFleet) readEvent(ctx context.Context) error {
	r := f.r
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.Targets[0]+"/v1/events/"+r.eventPath, nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("bots: reading event %q: %w", r.cfg.Event, err)
	}
	defer drain(resp.Body)
	var info botEventInfo
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bots: GET event %q answered %d", r.cfg.Event, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxSeatsBody)).Decode(&info); err != nil {
		return fmt.Errorf("bots: decoding event %q: %w", r.cfg.Event, err)
	}
	if info.Limits != nil {
		f.lim = *info.Limits
	}
	f.lim.MaxPerBooking = max(info.MaxPerBooking, 1)
	f.pow = info.Challenge != nil && info.Challenge.Type == "pow"
	f.seats = info.Seats
	if m := info.SeatMap; m != nil && len(f.seats) == 0 {
		for _, row := range m.Rows {
			for i := 1; i <= m.PerRow; i++ {
				f.seats = append(f.seats, fmt.Sprintf("%s-%02d", row, i))
			}
		}
	}
	return nil
}

func (f *botFleet) limit(kind string) {
	f.limited429.Add(1)
	f.mu.Lock()
	f.limited[kind]++
	f.mu.Unlock()
}

func (f *botFleet) fail(kind string, code int) {
	key := kind + "_transport"
	if code > 0 {
		key = kind + "_" + strconv.Itoa(code)
	}
	f.mu.Lock()
	f.errors[key]++
	f.mu.Unlock()
}

func (f *botFleet) hold(delta int64) {
	atomicMax(&f.heldMax, f.held.Add(delta))
}

// report sums up the bots' counters and compares them with what the limits allow.
func (f *botFleet) report(start, end time.Time) *BotReport {
	rep := &BotReport{
		Bots: f.cfg.N, Mode: f.cfg.Mode, DurationS: end.Sub(start).Seconds(),
		Requests: f.requests.Load(), ChallengesSolved: f.solved.Load(), Tickets: f.tickets.Load(), Admitted: f.admitted.Load(),
		SlotsHeld: f.heldMax.Load(), SlotsHeldEnd: f.held.Load(), MaxPollsPerTicket: f.maxPolls.Load(),
		ConnsOpened: f.opened.Load(), Conns: f.openMax.Load(),
		Bookings: f.bookings.Load(), UnitsBought: f.units.Load(), RateLimited: f.limited429.Load(),
		Limits: f.lim,
	}
	if f.plan.active() {
		rep.Addresses = f.plan.distinct(f.cfg.N)
	}
	f.mu.Lock()
	rep.Limited = maps.Clone(f.limited)
	rep.Errors = maps.Clone(f.errors)
	f.mu.Unlock()

	addrs := int64(max(rep.Addresses, 1))
	tickets := f.lim.JoinsPerClient
	if w := f.lim.JoinWindowS * 1000; w > 0 {
		tickets += f.lim.JoinsPerClient * end.Sub(start).Milliseconds() / w
	}
	rep.Allowed = BotAllowed{
		Tickets:        addrs * tickets,
		Conns:          addrs * f.lim.PushPerClient,
		PollsPerTicket: f.lim.PollsPerTicket,
	}
	if n := int64(len(distinct(f.r.cfg.Targets))); n > 1 && f.lim.PollsPerTicket > 0 {
		// A poll of a ticket waiting far back is answered from the instance's view of the line
		// and counted on the others within a quarter of a second: each other instance may
		// answer what the bots polled of one ticket in a quarter of a second past the limit.
		rep.Allowed.PollsPerTicket += (n - 1) * f.maxBurst.Load()
	}
	rep.Allowed.SlotsHeld = rep.Allowed.Tickets
	rep.Allowed.UnitsBought = rep.Allowed.Tickets * f.lim.MaxPerBooking
	rep.Over = []string{}
	for _, c := range []struct {
		name     string
		got, may int64
	}{
		{"tickets", rep.Tickets, rep.Allowed.Tickets},
		{"conns", rep.Conns, rep.Allowed.Conns},
		{"polls_per_ticket", rep.MaxPollsPerTicket, rep.Allowed.PollsPerTicket},
		{"slots_held", rep.SlotsHeld, rep.Allowed.SlotsHeld},
		{"units_bought", rep.UnitsBought, rep.Allowed.UnitsBought},
	} {
		if c.may > 0 && c.got > c.may {
			rep.Over = append(rep.Over, fmt.Sprintf("%s %d > %d", c.name, c.got, c.may))
		}
	}
	return rep
}

func (rep *BotReport) writeSummary(w io.Writer) {
	fmt.Fprintf(w, "  bots        %d %s bot(s) on %d address(es), %.1fs, %d requests, %d challenges solved; 429s %d (%s)\n",
		rep.Bots, rep.Mode, rep.Addresses, rep.DurationS, rep.Requests, rep.ChallengesSolved, rep.RateLimited, counts(rep.Limited))
	fmt.Fprintf(w, "              tickets %d (allowed %d), admitted %d, slots held %d (at the end %d), polls per ticket and window %d (allowed %d)\n",
		rep.Tickets, rep.Allowed.Tickets, rep.Admitted, rep.SlotsHeld, rep.SlotsHeldEnd, rep.MaxPollsPerTicket, rep.Allowed.PollsPerTicket)
	fmt.Fprintf(w, "              push connections %d at once (allowed %d), %d opened; units bought %d in %d bookings; errors %s\n",
		rep.Conns, rep.Allowed.Conns, rep.ConnsOpened, rep.UnitsBought, rep.Bookings, counts(rep.Errors))
	if len(rep.Over) > 0 {
		fmt.Fprintf(w, "              OVER THE LIMITS: %s\n", strings.Join(rep.Over, ", "))
	}
}

// bot is one client: its address's http.Client, its tickets.
type bot struct {
	f       *botFleet
	id      int
	client  *http.Client
	tickets *botTickets
	next    atomic.Uint64 // round robin over the targets
	joinAt  atomic.Int64  // unix ns before which joins are not tried (modes that wait out a 429)
}

// botTicket is one of a bot's tickets.
type botTicket struct {
	id       string
	target   int // the target that issued it (any target serves it)
	admitted bool
	dead     bool  // ended, left or not found: no longer used
	full     bool  // the server refused more connections on it
	polls    int64 // polls answered 200 in pollWin
	pollWin  int64 // start of the poll window of polls (unix ms)
	burst    int64 // polls answered 200 in burstAt's quarter of a second
	burstAt  int64 // start of that quarter (unix ms, a multiple of 250)
}

// botTickets are a bot's tickets, shared by its workers.
type botTickets struct {
	mu   sync.Mutex
	list []*botTicket
	next int
}

func (ts *botTickets) add(t *botTicket) {
	ts.mu.Lock()
	ts.list = append(ts.list, t)
	ts.mu.Unlock()
}

// pick returns the next live ticket round robin that ok accepts, or nil.
func (ts *botTickets) pick(ok func(*botTicket) bool) *botTicket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for range len(ts.list) {
		ts.next = (ts.next + 1) % len(ts.list)
		if t := ts.list[ts.next]; !t.dead && ok(t) {
			return t
		}
	}
	return nil
}

// target returns the base URL of the bot's next request.
func (b *bot) target() (int, string) {
	ti := int((b.next.Add(1) + uint64(b.id)) % uint64(len(b.f.r.cfg.Targets)))
	return ti, b.f.r.cfg.Targets[ti]
}

func (b *bot) eventURL(base string) string { return base + "/v1/events/" + b.f.r.eventPath }

// botAnswer is one answer: its status (0 = transport error), Retry-After, problem code, body.
type botAnswer struct {
	code  int
	retry time.Duration
	prob  string
	body  []byte
}

// newJSONRequest makes a request that accepts JSON, with body (nil: none) as JSON and bearer
// ("" = none) as its Authorization.
func newJSONRequest(ctx context.Context, method, u, bearer string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return req, nil
}

// send sends one request of the bot and reads its answer. ok is false when ctx ended.
func (b *bot) send(ctx context.Context, method, u, bearer string, body any, idemKey string) (a botAnswer, ok bool) {
	req, err := newJSONRequest(ctx, method, u, bearer, body)
	if err != nil {
		return a, ctx.Err() == nil
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	b.f.requests.Add(1)
	resp, err := b.client.Do(req)
	if err != nil {
		return a, ctx.Err() == nil
	}
	defer drain(resp.Body)
	a.code = resp.StatusCode
	a.body, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if a.code >= 400 {
		var p problem
		_ = json.Unmarshal(a.body, &p)
		a.prob = p.Code
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		a.retry = time.Duration(s) * time.Second
	}
	return a, ctx.Err() == nil
}

// work is one worker of the bot, until ctx ends.
func (b *bot) work(ctx context.Context, w int) {
	var fails int
	for ctx.Err() == nil {
		var pause time.Duration
		switch b.f.cfg.Mode {
		case BotStuff:
			pause = b.stuff(ctx)
		case BotSquat:
			pause = b.squat(ctx)
		case BotConnections:
			pause = b.connections(ctx)
		case BotHoard:
			pause = b.hoard(ctx, w)
		}
		if pause < 0 { // a transport error: back off, doubling
			fails++
			pause = min(time.Duration(1<<min(fails, 12))*time.Millisecond, botMaxBackoff)
		} else {
			fails = 0
		}
		if pause > 0 && !sleep(ctx, pause) {
			return
		}
	}
}

// join takes a new ticket. respect makes a 429 set the bot's next join after Retry-After.
// It returns the ticket (nil when refused), and the pause the worker should take (< 0 after
// a transport error).
func (b *bot) join(ctx context.Context, respect bool) (*botTicket, ticket, time.Duration) {
	if respect && time.Now().UnixNano() < b.joinAt.Load() {
		return nil, ticket{}, 0
	}
	ti, base := b.target()
	var body any // an anonymous join: no body, or the proof of work
	if b.f.pow {
		proof, pause := b.proof(ctx, base)
		if proof == nil {
			return nil, ticket{}, pause
		}
		body = proof
	}
	a, ok := b.send(ctx, http.MethodPost, b.eventURL(base)+"/tickets", "", body, "")
	if !ok {
		return nil, ticket{}, 0
	}
	switch {
	case a.code == 0:
		b.f.fail("join", 0)
		return nil, ticket{}, -1
	case a.code == http.StatusTooManyRequests:
		b.f.limit("join")
		if respect {
			b.joinAt.Store(time.Now().Add(min(max(a.retry, time.Second), botMaxBackoff)).UnixNano())
		}
		return nil, ticket{}, 0
	case a.code != http.StatusCreated && a.code != http.StatusOK:
		b.f.fail("join", a.code)
		return nil, ticket{}, pauseAfter(a.code)
	}
	var tk ticket
	if err := json.Unmarshal(a.body, &tk); err != nil || tk.TicketID == "" {
		b.f.fail("join", -1)
		return nil, ticket{}, 0
	}
	b.f.tickets.Add(1)
	t := &botTicket{id: tk.TicketID, target: ti}
	if tk.Status == statusAdmitted {
		t.admitted = true
		b.f.admitted.Add(1)
		if b.f.holds() {
			b.f.hold(1)
		}
	}
	return t, tk, 0
}

// proof fetches a challenge of the event and solves it, as the users do (challenge.go) but
// with the bot's own client: the join body, or nil (with the worker's pause) when the fetch
// failed or ctx ended. The CPU a bot spends here is what the challenge charges per ticket.
func (b *bot) proof(ctx context.Context, base string) (map[string]string, time.Duration) {
	a, ok := b.send(ctx, http.MethodGet, b.eventURL(base)+"/challenge", "", nil, "")
	if !ok {
		return nil, 0
	}
	var ch challengeInfo
	if a.code != http.StatusOK || json.Unmarshal(a.body, &ch) != nil || ch.Type != "pow" {
		b.f.fail("challenge", a.code)
		if a.code == 0 {
			return nil, -1
		}
		return nil, max(pauseAfter(a.code), time.Second) // not a challenge a bot solves: no spin
	}
	sol, err := challenge.Solve(ctx, ch.Challenge)
	if err != nil {
		return nil, 0
	}
	b.f.solved.Add(1)
	return map[string]string{"challenge": ch.Challenge, "solution": sol}, 0
}

// pauseAfter is the pause after an unexpected answer: none for a 4xx (the bot goes on at full
// speed), a short one for a 5xx (an overloaded server is not helped by a spin).
func pauseAfter(code int) time.Duration {
	if code >= 500 {
		return 100 * time.Millisecond
	}
	return 0
}

func (b *bot) stuff(ctx context.Context) time.Duration {
	_, _, pause := b.join(ctx, false)
	return pause
}

// poll reads t's status, counting its polls per window and its admission; it returns the
// ticket read (ok false when the poll was refused or failed) and the worker's pause.
func (b *bot) poll(ctx context.Context, t *botTicket) (tk ticket, ok bool, pause time.Duration) {
	_, base := b.target()
	sent := time.Now()
	a, alive := b.send(ctx, http.MethodGet, b.eventURL(base)+"/tickets/"+url.PathEscape(t.id), "", nil, "")
	if !alive {
		return tk, false, 0
	}
	switch {
	case a.code == 0:
		b.f.fail("poll", 0)
		return tk, false, -1
	case a.code == http.StatusTooManyRequests:
		b.f.limit("poll")
		return tk, false, 0
	case a.code == http.StatusNotFound || a.code == http.StatusGone:
		b.end(t)
		return tk, false, 0
	case a.code != http.StatusOK:
		b.f.fail("poll", a.code)
		return tk, false, pauseAfter(a.code)
	}
	if err := json.Unmarshal(a.body, &tk); err != nil {
		b.f.fail("poll", -1)
		return tk, false, 0
	}
	b.countPoll(t, sent, time.Now())
	switch tk.Status {
	case statusAdmitted:
		b.tickets.mu.Lock()
		first := !t.admitted && !t.dead
		t.admitted = true
		b.tickets.mu.Unlock()
		if first {
			b.f.admitted.Add(1)
			b.f.hold(1)
		}
	case statusQueued:
	default: // ended
		b.end(t)
	}
	return tk, true, 0
}

// countPoll counts a poll of t sent at sent and answered 200 at answered, in their poll window
// when both are in the same one (see Report.MaxPollsPerTicket).
func (b *bot) countPoll(t *botTicket, sent, answered time.Time) {
	win := b.f.lim.PollWindowS * 1000
	if win <= 0 {
		return
	}
	now := answered.UnixMilli()
	b.tickets.mu.Lock()
	if q := now - now%viewLagMS; t.burstAt != q {
		t.burstAt, t.burst = q, 0
	}
	t.burst++
	burst := t.burst
	b.tickets.mu.Unlock()
	atomicMax(&b.f.maxBurst, burst)
	ws := now - now%win
	if s := sent.UnixMilli(); s-s%win != ws {
		return // straddles a window's end: the server may have counted it in either
	}
	b.tickets.mu.Lock()
	if t.pollWin != ws {
		t.pollWin, t.polls = ws, 0
	}
	t.polls++
	n := t.polls
	b.tickets.mu.Unlock()
	atomicMax(&b.f.maxPolls, n)
}

// distinct returns the targets named once each (a target listed twice is one instance).
func distinct(targets []string) []string {
	seen := make(map[string]bool, len(targets))
	var out []string
	for _, t := range targets {
		if k := strings.TrimSuffix(strings.ToLower(t), "/"); !seen[k] {
			seen[k] = true
			out = append(out, t)
		}
	}
	return out
}

// viewLagMS is how long an instance's polls of a ticket waiting far back take to count on the
// other instances (line.ViewRefresh; docs/api.md, Exactness), in ms.
const viewLagMS = 250

// end marks t as no longer usable, giving back its slot if it held one.
func (b *bot) end(t *botTicket) {
	b.tickets.mu.Lock()
	wasHeld := t.admitted && !t.dead
	t.dead = true
	b.tickets.mu.Unlock()
	if wasHeld && b.f.holds() {
		b.f.hold(-1)
	}
}

func (b *bot) squat(ctx context.Context) time.Duration {
	if t, _, pause := b.join(ctx, true); t != nil || pause != 0 {
		if t != nil {
			b.tickets.add(t)
		}
		return pause
	}
	t := b.tickets.pick(func(*botTicket) bool { return true })
	if t == nil {
		return time.Until(time.Unix(0, b.joinAt.Load()))
	}
	_, _, pause := b.poll(ctx, t)
	return pause
}

func (b *bot) connections(ctx context.Context) time.Duration {
	t := b.tickets.pick(func(t *botTicket) bool { return !t.full })
	if t == nil {
		nt, _, pause := b.join(ctx, true)
		if nt == nil {
			if pause == 0 {
				pause = max(time.Until(time.Unix(0, b.joinAt.Load())), 0)
			}
			return pause
		}
		b.tickets.add(nt)
		t = nt
	}
	_, base := b.target()
	u := "ws" + strings.TrimPrefix(b.eventURL(base), "http") + "/tickets/" + url.PathEscape(t.id) + "/ws"
	b.f.requests.Add(1)
	dctx, cancel := context.WithTimeout(ctx, b.f.r.cfg.RequestTimeout)
	ws, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: b.client})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		if resp == nil {
			b.f.fail("push", 0)
			return -1
		}
		var p problem
		if resp.Body != nil {
			p = readProblem(resp.Body)
		}
		switch {
		case resp.StatusCode == http.StatusTooManyRequests && p.Code == "too_many_ticket_connections":
			b.f.limit("push_ticket")
			b.tickets.mu.Lock()
			t.full = true
			b.tickets.mu.Unlock()
		case resp.StatusCode == http.StatusTooManyRequests:
			b.f.limit("push")
		case resp.StatusCode == http.StatusNotFound:
			b.end(t)
		default:
			b.f.fail("push", resp.StatusCode)
			return pauseAfter(resp.StatusCode)
		}
		return 0
	}
	b.f.opened.Add(1)
	atomicMax(&b.f.openMax, b.f.open.Add(1))
	// Kept open until the bots stop or the server closes it; reading answers the pings and
	// drops the messages.
	b.f.conns.Go(func() {
		defer b.f.open.Add(-1)
		defer ws.CloseNow()
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	})
	return 0
}

// hoard is one purchase: a ticket, admission, a hold, a booking. w names the worker (its
// idempotency keys).
func (b *bot) hoard(ctx context.Context, w int) time.Duration {
	t, tk, pause := b.join(ctx, true)
	if t == nil {
		if pause == 0 {
			pause = max(time.Until(time.Unix(0, b.joinAt.Load())), 0)
		}
		return pause
	}
	for tk.Status != statusAdmitted || tk.AdmissionToken == "" {
		if tk.Status != statusQueued && tk.Status != statusAdmitted {
			b.end(t)
			return 0
		}
		var ok bool
		var p time.Duration
		for !ok {
			if tk, ok, p = b.poll(ctx, t); ctx.Err() != nil {
				return 0
			}
			if t.dead {
				return 0
			}
			if p != 0 && !sleep(ctx, max(p, time.Millisecond)) {
				return 0
			}
		}
	}
	defer b.end(t) // booked or not, this ticket is done: the next purchase joins again
	_, base := b.target()
	rng := rand.New(rand.NewPCG(uint64(b.id), uint64(time.Now().UnixNano())))
	for attempt := 0; attempt < 5; attempt++ {
		var body map[string]any
		if len(b.f.seats) > 0 {
			want := make([]string, 0, b.f.lim.MaxPerBooking)
			for range b.f.lim.MaxPerBooking {
				want = append(want, b.f.seats[rng.IntN(len(b.f.seats))])
			}
			slices.Sort(want)
			body = map[string]any{"seats": slices.Compact(want)}
		} else {
			body = map[string]any{"quantity": b.f.lim.MaxPerBooking}
		}
		a, ok := b.send(ctx, http.MethodPost, b.eventURL(base)+"/holds", tk.AdmissionToken, body, "")
		if !ok {
			return 0
		}
		switch {
		case a.code == http.StatusCreated:
			var h holdAnswer
			_ = json.Unmarshal(a.body, &h)
			return b.book(ctx, base, tk.AdmissionToken, h, w)
		case a.code == http.StatusConflict:
			continue // taken seats, or fewer units left: try again
		case a.code == http.StatusTooManyRequests:
			b.f.limit("hold")
		case a.code == http.StatusGone: // sold out
			b.f.fail("hold", a.code)
			return time.Second
		default:
			b.f.fail("hold", a.code)
			if a.code == 0 {
				return -1
			}
			return pauseAfter(a.code)
		}
	}
	return 0
}

// book books hold h and counts its units.
func (b *bot) book(ctx context.Context, base, tok string, h holdAnswer, w int) time.Duration {
	key := fmt.Sprintf("%s-bot%d-%d-%s", b.f.r.cfg.UserPrefix, b.id, w, h.HoldID)
	for attempt := 0; attempt < 3; attempt++ {
		a, ok := b.send(ctx, http.MethodPost, b.eventURL(base)+"/bookings", tok, map[string]string{"hold_id": h.HoldID}, key)
		if !ok {
			return 0
		}
		switch {
		case a.code == http.StatusCreated || a.code == http.StatusOK:
			var bk struct {
				Quantity int64    `json:"quantity"`
				Seats    []string `json:"seats"`
			}
			_ = json.Unmarshal(a.body, &bk)
			n := bk.Quantity
			if n == 0 {
				n = int64(len(bk.Seats))
			}
			b.f.bookings.Add(1)
			b.f.units.Add(n)
			return 0
		case a.code == http.StatusTooManyRequests:
			b.f.limit("book")
		case a.code == 0 || a.code >= 500:
			b.f.fail("book", a.code)
		default:
			b.f.fail("book", a.code)
			return 0
		}
	}
	return 0
}

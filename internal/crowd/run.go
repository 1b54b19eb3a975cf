package crowd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ticket statuses as the API spells them.
const (
	statusQueued    = "QUEUED"
	statusAdmitted  = "ADMITTED"
	statusExpired   = "EXPIRED"
	statusClosed    = "CLOSED"
	statusSoldOut   = "SOLD_OUT"
	statusCompleted = "COMPLETED"
)

// Keys of Report.Terminal for outcomes that are HTTP answers rather than ticket statuses.
const (
	terminalGone = "GONE" // 410 whose problem names neither closed nor sold out
)

// Keys of Report.Errors that are not HTTP status codes.
const (
	errTransport = "transport"  // no HTTP answer: connection refused or reset, timeout, ...
	errDecode    = "decode"     // a 2xx whose body is not the ticket JSON
	errStatus    = "bad_status" // a ticket status this client does not know
	// errChallengeType: the event asks for a challenge the users cannot solve (an external
	// captcha), or one of an unknown form.
	errChallengeType = "challenge_type"
)

// Run creates the event if it does not exist, releases cfg.Users simulated users on it and
// returns what they saw. Setup messages and progress go to progress (nil = discard). Reaching
// the deadline is not an error: the users still waiting are reported as lost. Run returns an
// error only for an invalid Config or a failed event setup.
func Run(ctx context.Context, cfg Config, progress io.Writer) (Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	r := newRunner(cfg)
	if cfg.Client == nil {
		defer r.client.CloseIdleConnections()
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()

	if err := r.setup(ctx, progress); err != nil {
		return Report{}, err
	}
	if cfg.Book {
		if err := r.setupBook(ctx, progress); err != nil {
			return Report{}, err
		}
	}
	fmt.Fprintf(progress, "crowd: %d users on event %q via %d target(s), rate %s, concurrency %d, hold %s, deadline %s\n",
		cfg.Users, cfg.Event, len(cfg.Targets), rateString(cfg.Rate), cfg.Concurrency, cfg.Hold, cfg.Deadline)

	if r.userAddrs.active() {
		defer r.userAddrs.closeIdle()
	}
	var workers sync.WaitGroup
	for range cfg.Concurrency {
		workers.Go(r.worker)
	}
	if cfg.Presolve && r.pow {
		r.presolve(ctx, progress)
	}
	stopBots, err := r.startBots(ctx)
	if err != nil {
		close(r.calls)
		workers.Wait()
		return Report{}, err
	}
	stopProbe := r.startProbe(ctx)
	fmt.Fprintln(progress, "crowd: the users start now")
	r.start = time.Now()
	stopProgress := startProgress(progress, r)
	r.spawn(ctx)
	r.users.Wait()
	if cfg.Users == 0 {
		<-ctx.Done() // the bots alone: until the deadline or an interrupt
	}
	r.end = time.Now()
	close(r.calls)
	workers.Wait()
	stopProgress()
	bots, health := stopBots(), stopProbe()

	rep := r.report()
	rep.Bots, rep.Healthz = bots, health
	if os.Getenv(envChild) == "1" {
		rep.Histograms = r.histograms()
	}
	if r.book != nil {
		rep.Book = r.book.report(r.start)
	}
	rep.DeadlineReached = ctx.Err() != nil
	return rep, nil
}

func rateString(rate float64) string {
	if rate <= 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(rate, 'f', -1, 64) + "/s"
}

// runner is the shared state of one run. Everything users touch concurrently is atomic or
// behind a small mutex.
//
// The concurrency limit is a pool of cfg.Concurrency workers that send the requests, rather
// than a semaphore each user goroutine acquires before calling the client itself: the effect
// on the targets is the same (at most Concurrency requests in flight, handed out in arrival
// order), but a user goroutine never runs the deep stacks of net/http and encoding/json, so
// its stack stays small: measured with 100,000 users, ~4 KB of stack per user instead of
// ~7.7 KB with a semaphore (stacks grown during a request are kept while the user waits), and
// twice the join throughput on the same machine.
type runner struct {
	cfg       Config
	client    *http.Client
	eventPath string   // url.PathEscape(cfg.Event)
	ticketsOf []string // per target: target + "/v1/events/{id}/tickets"
	calls     chan *call
	// leaves carries the requests that end an admitted session (the leave): the workers take
	// them before any join or poll, because each frees a slot that everyone waiting needs
	// (measured with 50,000 users: leaves queued behind the flash crowd's joins held
	// max_active full of sessions that had ended, and the line moved at a fraction of
	// admit_rate).
	leaves chan *call
	users  sync.WaitGroup

	start, end time.Time
	maxActive  int64    // the event's max_active as read from the first target
	pow        bool     // the event asks joins for a proof of work (challenge.go)
	proofs     [][]byte // with Config.Presolve: user i's join body, solved before the start (nil: none)
	presolved  int64    // how many of proofs are set

	// counters
	joined        atomic.Int64 // users whose join succeeded
	admitted      atomic.Int64
	left          atomic.Int64 // admitted users whose DELETE was answered 2xx/404
	done          atomic.Int64 // users with an outcome (admitted and left, terminal, failed)
	failed        atomic.Int64
	requests      atomic.Int64
	errorsTotal   atomic.Int64
	active        atomic.Int64 // users holding an admission right now, as far as they know
	maxActiveSeen atomic.Int64
	maxServing    atomic.Int64 // highest serving any response has carried
	firstJoinSent atomic.Int64 // unix ns, 0 = none yet
	lastJoinDone  atomic.Int64 // unix ns

	joinLatency   *histogram    // µs
	statusLatency *histogram    // µs
	admission     *histogram    // ms
	pushLatency   *histogram    // µs, admitted message ts to receipt (Push)
	solveTime     *histogram    // µs, solving a challenge (challenge.go)
	dialSlots     chan struct{} // bounds WebSocket upgrades in flight (Push)
	pushAdmitted  atomic.Int64
	pushFallbacks atomic.Int64
	pushSilent    atomic.Int64
	rejoins       atomic.Int64 // joins made again after the ticket was gone
	failovers     atomic.Int64 // moves to the next instance after a failure

	mu       sync.Mutex // guards the maps and the examples below
	errors   map[string]int64
	terminal map[string]int64
	fifo     fifoLog

	book *booker // the --book mode's state (book.go); nil without it

	userAddrs *addrPlan // the users' source addresses (addr.go)
}

// clientOf returns the client that carries user i's requests: its source address's with
// Config.UserAddrs, else the run's one client.
func (r *runner) clientOf(user int) *http.Client {
	if c := r.userAddrs.client(user); c != nil {
		return c
	}
	return r.client
}

func newRunner(cfg Config) *runner {
	r := &runner{
		cfg:           cfg,
		client:        cfg.Client,
		eventPath:     url.PathEscape(cfg.Event),
		calls:         make(chan *call),
		leaves:        make(chan *call),
		joinLatency:   newHistogram(int64(time.Hour / time.Microsecond)),
		statusLatency: newHistogram(int64(time.Hour / time.Microsecond)),
		admission:     newHistogram(int64(7 * 24 * time.Hour / time.Millisecond)),
		pushLatency:   newHistogram(int64(time.Hour / time.Microsecond)),
		solveTime:     newHistogram(int64(time.Hour / time.Microsecond)),
		dialSlots:     make(chan struct{}, cfg.Concurrency),
		errors:        map[string]int64{},
		terminal:      map[string]int64{},
	}
	if r.client == nil {
		r.client = newClient(cfg.Concurrency, cfg.RequestTimeout)
	}
	r.userAddrs = newAddrPlan(cfg.UserAddrs, cfg.Concurrency, cfg.Users, cfg.RequestTimeout)
	for _, t := range cfg.Targets {
		r.ticketsOf = append(r.ticketsOf, t+"/v1/events/"+r.eventPath+"/tickets")
	}
	return r
}

// newClient returns a client whose keep-alive pool can hold one idle connection per request
// that may be in flight, so that a steady load never opens new connections. No proxy: a load
// generator talks to its targets directly.
func newClient(concurrency int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   min(timeout, 10*time.Second),
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          concurrency,
		MaxIdleConnsPerHost:   concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// eventInfo is the part of GET /v1/events/{id} the run uses.
type eventInfo struct {
	MaxActive  int64   `json:"max_active"`
	AdmitRate  float64 `json:"admit_rate"`
	SessionTTL float64 `json:"session_ttl_s"`
	ClaimTTL   float64 `json:"claim_ttl_s"`
	Waiting    int64   `json:"waiting"`
	Active     int64   `json:"active"`
	Serving    int64   `json:"serving"`
	Challenge  *struct {
		Type       string `json:"type"`
		Difficulty int    `json:"difficulty"`
	} `json:"challenge"`
}

// setup makes sure the event exists on every target, creating it where GET says 404 (never
// overwriting an existing event's settings), and reads max_active and the current serving.
func (r *runner) setup(ctx context.Context, out io.Writer) error {
	cfg := r.cfg
	for i, target := range cfg.Targets {
		info, code, err := r.getEvent(ctx, target)
		if err != nil {
			return err
		}
		switch code {
		case http.StatusOK:
			fmt.Fprintf(out, "crowd: event %q exists on %s (max_active %d, admit_rate %g/s, waiting %d, active %d, serving %d): using its settings\n",
				cfg.Event, target, info.MaxActive, info.AdmitRate, info.Waiting, info.Active, info.Serving)
		case http.StatusNotFound:
			if cfg.AdminKey == "" {
				return fmt.Errorf("event %q does not exist on %s and there is no admin key to create it (--admin-key or WAITROOM_ADMIN_KEY)", cfg.Event, target)
			}
			code, err := r.putEvent(ctx, target)
			if err != nil {
				return err
			}
			verb := "created"
			if code == http.StatusOK { // someone created it between our GET and PUT
				verb = "updated (it appeared meanwhile)"
			}
			fmt.Fprintf(out, "crowd: %s event %q on %s (max_active %d, admit_rate %g/s, session_ttl_s %d, claim_ttl_s %d)\n",
				verb, cfg.Event, target, cfg.MaxActive, cfg.AdmitRate, cfg.SessionTTL, cfg.ClaimTTL)
			if info, code, err = r.getEvent(ctx, target); err != nil {
				return err
			} else if code != http.StatusOK {
				return fmt.Errorf("event %q on %s: GET after PUT answered %d", cfg.Event, target, code)
			}
		default:
			return fmt.Errorf("event %q on %s: GET answered %d", cfg.Event, target, code)
		}
		if i == 0 {
			r.maxActive = info.MaxActive
			if ch := info.Challenge; ch != nil && !cfg.Named {
				r.pow = ch.Type == "pow"
				what := "users cannot solve it: their joins will fail"
				if r.pow {
					what = fmt.Sprintf("difficulty %d, users solve it as the waiting-room page does", ch.Difficulty)
				}
				fmt.Fprintf(out, "crowd: event %q asks every join for a %s challenge (%s)\n", cfg.Event, ch.Type, what)
			}
		} else if info.MaxActive != r.maxActive {
			fmt.Fprintf(out, "crowd: warning: %s reports max_active %d, %s reports %d: do the targets share one store?\n",
				target, info.MaxActive, cfg.Targets[0], r.maxActive)
		}
		// A serving read before any user request is causally earlier than all of them.
		atomicMax(&r.maxServing, info.Serving)
	}
	return nil
}

func (r *runner) getEvent(ctx context.Context, target string) (eventInfo, int, error) {
	var info eventInfo
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/events/"+r.eventPath, nil)
	if err != nil {
		return info, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return info, 0, fmt.Errorf("get event %q on %s: %w", r.cfg.Event, target, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info); err != nil {
			return info, resp.StatusCode, fmt.Errorf("get event %q on %s: decoding the answer: %w", r.cfg.Event, target, err)
		}
	}
	return info, resp.StatusCode, nil
}

func (r *runner) putEvent(ctx context.Context, target string) (int, error) {
	cfg := r.cfg
	fields := map[string]any{
		"name":          cfg.Event,
		"max_active":    cfg.MaxActive,
		"admit_rate":    cfg.AdmitRate,
		"session_ttl_s": cfg.SessionTTL,
		"claim_ttl_s":   cfg.ClaimTTL,
		"seats":         bookSeats(cfg),
	}
	maps.Copy(fields, eventExtras(cfg))
	body, err := json.Marshal(fields)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, target+"/v1/events/"+r.eventPath, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+cfg.AdminKey)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("create event %q on %s: %w", cfg.Event, target, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		p := readProblem(resp.Body)
		return resp.StatusCode, fmt.Errorf("create event %q on %s: answered %d %s", cfg.Event, target, resp.StatusCode, p)
	}
	return resp.StatusCode, nil
}

// spawn starts the users, paced by cfg.Rate, until all are started or ctx ends.
func (r *runner) spawn(ctx context.Context) {
	var pace *time.Timer
	for i := range r.cfg.Users {
		if r.cfg.Rate > 0 && i > 0 {
			at := r.start.Add(time.Duration(float64(i) / r.cfg.Rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				if pace == nil {
					pace = time.NewTimer(d)
				} else {
					pace.Reset(d)
				}
				select {
				case <-pace.C:
				case <-ctx.Done():
					pace.Stop()
					return
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.users.Go(func() { r.user(ctx, i) })
	}
}

// outcome is how a user's run ended.
type outcome int

const (
	outLost     outcome = iota // stopped by the deadline while still waiting
	outAdmitted                // admitted (whether or not its leave got through)
	outTerminal                // a terminal status or a 404/410
	outFailed                  // gave up after an error
)

func (r *runner) user(ctx context.Context, i int) {
	switch r.runUser(ctx, i) {
	case outAdmitted, outTerminal:
		r.done.Add(1)
	case outFailed:
		r.failed.Add(1)
		r.done.Add(1)
	}
}

// ticket is the part of a ticket answer the users need.
type ticket struct {
	TicketID   string  `json:"ticket_id"`
	Status     string  `json:"status"`
	Number     int64   `json:"number"`
	Serving    int64   `json:"serving"`
	PollAfterS float64 `json:"poll_after_s"`
	// AdmissionToken is read by the book mode.
	AdmissionToken string `json:"admission_token"`
}

// runUser is one user's life: join, wait (poll, or push with --push) until admitted or the
// ticket ends, then stay and leave. A user heals by itself, as the waiting-room page does:
//
//   - a request that fails (transport error or timeout, 5xx, 429) is retried after a jittered
//     back-off, never sooner than a 429's or 503's Retry-After (spread over 1-1.5 times it), on
//     the next instance of Config.Targets (nextTarget), until the deadline; the user stays on
//     the instance that answered;
//   - a ticket that answers 404 on two polls in a row (each on the next instance) is gone —
//     the store lost it — and the user joins again with the same Idempotency-Key: a ticket
//     still live would come back as it is, a lost one is replaced by a new one at the back;
//   - with --push, a WebSocket that closes, fails, or stays silent (no message and no answer
//     to a ping within Config.PushSilence) is replaced: one poll on the next instance, then a
//     new socket there, after a jittered back-off that grows while sockets keep failing (a
//     socket that lived less than pushHealthyAfter counts as failed, however it started), and
//     is never shorter than the Retry-After of a refused upgrade (503 at an instance's cap).
func (r *runner) runUser(ctx context.Context, i int) outcome {
	c := &call{ctx: ctx, user: i, target: i % len(r.cfg.Targets), done: make(chan struct{}, 1)}
	if r.proofs != nil {
		c.proof = r.proofs[i] // nil when it could not solve one beforehand: it solves on the clock
	}
	tk, joinStart, out, ok := r.join(c)
	if !ok {
		return out
	}
	r.joined.Add(1)

	push := r.cfg.Push
	pushFails := 0 // sockets that failed in a row
	for {
		switch tk.Status {
		case statusAdmitted:
			return r.admittedUser(c, tk.TicketID, joinStart)
		case statusQueued:
		case statusExpired, statusClosed, statusSoldOut, statusCompleted:
			r.addTerminal(tk.Status)
			return outTerminal
		default:
			r.addError(errStatus)
			return outFailed
		}
		wait := r.pollWait(tk.PollAfterS)
		if push {
			res, out, retryAfter := r.waitPush(c, tk.TicketID, joinStart)
			switch res {
			case pushDone:
				return out
			case pushRefused: // no push for this ticket here (4xx on the upgrade): poll
				push = false
			case pushHealthy:
				pushFails = 0
				fallthrough
			default: // the socket failed or went silent: ask the next instance, then reconnect
				r.nextTarget(c)
				wait = max(r.backoffUpTo(pushFails, pushRetryCap), retryAfter)
				pushFails++
			}
		}
		next, gone, out, done := r.poll(c, tk.TicketID, wait)
		if done {
			return out
		}
		if gone { // join again, same key: the ticket the store lost, or a new one at the back
			r.rejoins.Add(1)
			if next, _, out, ok = r.join(c); !ok {
				return out
			}
		}
		tk = next
	}
}

// join sends the user's join until it is answered with a ticket, retrying on 5xx, 429 and
// transport errors with back-off, each retry on the next instance: the user's one
// Idempotency-Key makes that safe. ok is false when the user is done: out says how (the
// deadline, a 410, another 4xx).
//
// For an event with a challenge the user first solves one (challenge.go) and sends it with
// every retry; a join refused for its challenge gets a new one at once. The time to admission
// counts from the start of the first solving then, as a person's wait does.
func (r *runner) join(c *call) (tk ticket, joinStart time.Time, out outcome, ok bool) {
	refused := 0 // challenge refusals in a row
	for attempt := 0; ; attempt++ {
		if c.proof == nil && (r.pow || refused > 0) && !r.cfg.Named {
			if attempt == 0 {
				joinStart = time.Now()
			}
			if out, ok := r.prove(c); !ok {
				return tk, joinStart, out, false
			}
		}
		a, sent := r.do(c, kindJoin, r.ticketsOf[c.target])
		if !sent {
			return tk, joinStart, outLost, false
		}
		if attempt == 0 && joinStart.IsZero() {
			joinStart = a.sent
		}
		switch {
		case a.code == http.StatusOK || a.code == http.StatusCreated:
			return a.tk, joinStart, 0, true
		case a.code == http.StatusGone:
			r.addTerminal(goneKind(a.problem))
			return tk, joinStart, outTerminal, false
		case challengeRefused(a) && !r.cfg.Named && refused < maxChallenges:
			refused++
			c.proof = nil
			continue
		case !retryable(a.code):
			return tk, joinStart, outFailed, false
		}
		refused = 0
		r.nextTarget(c)
		if !sleep(c.ctx, max(r.backoff(attempt), a.retryAfter)) {
			return tk, joinStart, outLost, false
		}
	}
}

// poll waits wait, then reads the ticket until the answer is one, retrying failures with
// back-off on the next instance. gone is true when the ticket answered 404 goneAfter times
// since the last ticket answer (each time on the next instance): the store lost it. done is
// true when the user is done, out says how: the deadline (outLost), a 410 (outTerminal, as
// its problem says) or another 4xx (outFailed).
func (r *runner) poll(c *call, ticketID string, wait time.Duration) (tk ticket, gone bool, out outcome, done bool) {
	notFound := 0
	for fails := 0; ; fails++ {
		if !sleep(c.ctx, wait) {
			return tk, false, outLost, true
		}
		a, sent := r.do(c, kindStatus, r.ticketURL(c.target, ticketID))
		switch {
		case !sent:
			return tk, false, outLost, true
		case a.code == http.StatusOK:
			return a.tk, false, 0, false
		case a.code == http.StatusNotFound:
			if notFound++; notFound >= goneAfter {
				return tk, true, 0, false
			}
		case a.code == http.StatusGone:
			r.addTerminal(goneKind(a.problem))
			return tk, false, outTerminal, true
		case !retryable(a.code):
			return tk, false, outFailed, true
		}
		r.nextTarget(c)
		wait = max(r.backoff(fails), a.retryAfter)
	}
}

// nextTarget moves the user to the next instance after a failure there (no move with one
// target).
func (r *runner) nextTarget(c *call) {
	if n := len(r.cfg.Targets); n > 1 {
		c.target = (c.target + 1) % n
		r.failovers.Add(1)
	}
}

// ticketURL is the ticket's URL on target ti.
func (r *runner) ticketURL(ti int, ticketID string) string {
	return r.ticketsOf[ti] + "/" + url.PathEscape(ticketID)
}

// admittedUser counts the admission, holds it for cfg.Hold and leaves (retrying a failed
// DELETE on the next instance a few times: the session ends by itself anyway).
func (r *runner) admittedUser(c *call, ticketID string, joinStart time.Time) outcome {
	ctx := c.ctx
	r.admitted.Add(1)
	r.admission.record(time.Since(joinStart).Milliseconds())
	atomicMax(&r.maxActiveSeen, r.active.Add(1))
	c.inSession = true
	defer r.endSession(c)
	if r.book != nil { // --book: hold and book instead of staying and leaving
		return r.bookUser(c, r.ticketURL(c.target, ticketID), c.user)
	}
	if r.cfg.Hold > 0 && !sleep(ctx, r.cfg.Hold) {
		return outAdmitted // the deadline: stop where we are
	}
	r.endSession(c)
	for attempt := 0; attempt < leaveAttempts; attempt++ {
		a, ok := r.do(c, kindLeave, r.ticketURL(c.target, ticketID))
		if !ok {
			break
		}
		if a.code/100 == 2 || a.code == http.StatusNotFound {
			r.left.Add(1)
			break
		}
		r.nextTarget(c)
		if !retryable(a.code) || !sleep(ctx, max(r.backoff(attempt), a.retryAfter)) {
			break
		}
	}
	return outAdmitted
}

// pollWait is the wait the server asked for, scaled, between minPollWait and maxPollWait.
func (r *runner) pollWait(pollAfterS float64) time.Duration {
	s := pollAfterS * r.cfg.PollScale
	if !(s < maxPollWait.Seconds()) { // NaN or absurd: do not overflow time.Duration
		return maxPollWait
	}
	return max(time.Duration(s*float64(time.Second)), minPollWait)
}

// backoff is the wait after the n-th consecutive failure (n from 0): retryBase doubling up to
// retryCap, with jitter in [d/2, d] so that failed users do not come back in lockstep.
func (r *runner) backoff(n int) time.Duration { return r.backoffUpTo(n, retryCap) }

// backoffUpTo is backoff capped at limit instead of retryCap.
func (r *runner) backoffUpTo(n int, limit time.Duration) time.Duration {
	d := r.cfg.retryBase << min(n, 16)
	if d <= 0 || d > limit {
		d = limit
	}
	return d/2 + rand.N(d/2+1)
}

func retryable(code int) bool {
	return code <= 0 || code == http.StatusTooManyRequests || code >= 500
}

// goneKind names the terminal outcome of a 410 from its problem code or title.
func goneKind(p problem) string {
	s := strings.ToLower(p.Code + " " + p.Title + " " + p.Detail)
	switch {
	case strings.Contains(s, "sold"):
		return statusSoldOut
	case strings.Contains(s, "close"):
		return statusClosed
	}
	return terminalGone
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

type reqKind uint8

const (
	kindJoin reqKind = iota
	kindStatus
	kindLeave
	kindChallenge // GET the event's challenge (challenge.go)
)

// answer is what one request got back.
type answer struct {
	// code is the HTTP status; 0 = transport error, -1 = a 2xx whose body did not decode.
	code    int
	tk      ticket
	ch      challengeInfo // kindChallenge's answer
	problem problem
	sent    time.Time
	// retryAfter is a 429's or 503's Retry-After, spread over [1, 1.5] times itself
	// (jitterUp): the least wait before the retry (0: none).
	retryAfter time.Duration
}

type problem struct {
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

func (p problem) String() string {
	var parts []string
	for _, s := range []string{p.Code, p.Title, p.Detail} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// call is one user's request to a worker and its answer. Each user has one, reused for all its
// requests.
type call struct {
	ctx    context.Context
	user   int // index of the user (for the named join body)
	target int // index of the user's target
	kind   reqKind
	url    string
	proof  []byte // the join's body for an event with a challenge (challenge.go); nil = none
	a      answer
	ok     bool
	done   chan struct{} // buffered 1: the worker never blocks on it
	// inSession: the user is counted in runner.active (from its ADMITTED to the request that
	// ends its session being sent: endSession).
	inSession bool
}

// endSession takes c's user out of the active count, once: before the request that ends its
// session (a leave, a booking) is sent, so that the count is of sessions the server surely
// still held, and never more than it.
func (r *runner) endSession(c *call) {
	if c.inSession {
		c.inSession = false
		r.active.Add(-1)
	}
}

// do hands the request to a worker as soon as one is free (or gives up when ctx ends) and waits
// for its answer. ok is false when ctx ended first: the user must stop, and nothing is counted
// as an error.
func (r *runner) do(c *call, kind reqKind, u string) (answer, bool) {
	c.kind, c.url = kind, u
	ch := r.calls
	if kind == kindLeave {
		ch = r.leaves
	}
	select {
	case ch <- c:
	case <-c.ctx.Done():
		return answer{}, false
	}
	<-c.done // the worker always answers: its request is bounded by ctx and the timeouts
	return c.a, c.ok
}

// worker sends requests until r.calls is closed, a waiting leave before anything else.
func (r *runner) worker() {
	for {
		var c *call
		select {
		case c = <-r.leaves:
		default:
			var ok bool
			select {
			case c = <-r.leaves:
			case c, ok = <-r.calls:
				if !ok {
					return
				}
			}
		}
		c.a, c.ok = r.send(c.ctx, c.kind, c.target, c.user, c.url, c.proof)
		c.done <- struct{}{}
	}
}

var methods = [...]string{kindJoin: http.MethodPost, kindStatus: http.MethodGet, kindLeave: http.MethodDelete, kindChallenge: http.MethodGet}

// send sends one request, reads and closes the body, records latency, errors and the fairness
// observations. proof is a join's body for an event with a challenge (nil: none).
func (r *runner) send(ctx context.Context, kind reqKind, ti, user int, u string, proof []byte) (a answer, ok bool) {
	if ctx.Err() != nil {
		return a, false
	}
	target := r.cfg.Targets[ti]
	var body []byte
	if kind == kindJoin {
		body = proof
	}
	if kind == kindJoin && r.cfg.Named {
		body, _ = json.Marshal(struct {
			UserID string `json:"user_id"`
		}{r.cfg.UserPrefix + "-" + strconv.Itoa(user)})
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, methods[kind], u, rd)
	if err != nil { // cannot happen with validated targets
		r.addError(errTransport)
		return a, true
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if kind == kindJoin && r.cfg.Named {
		req.Header.Set("Authorization", "Bearer "+r.cfg.AdminKey)
	}
	if kind == kindJoin {
		// One key per user, sent again with every retry of its join (to any instance): a
		// join whose answer was lost takes no second place.
		req.Header.Set("Idempotency-Key", r.cfg.UserPrefix+"-join-"+strconv.Itoa(user))
	}

	// Read before sending: every response that completed before this point carried a serving
	// this request's answer must not contradict.
	sentMax := r.maxServing.Load()
	a.sent = time.Now()
	if kind == kindJoin {
		r.firstJoinSent.CompareAndSwap(0, a.sent.UnixNano())
	}
	r.requests.Add(1)
	resp, err := r.clientOf(user).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return a, false
		}
		r.addError(errTransport)
		return a, true
	}
	a.code = resp.StatusCode
	if a.code == http.StatusTooManyRequests || a.code == http.StatusServiceUnavailable {
		a.retryAfter = jitterUp(parseRetryAfter(resp.Header.Get("Retry-After")))
	}
	expected := false
	switch {
	case (a.code == http.StatusOK || a.code == http.StatusCreated) && kind != kindLeave:
		expected = true
		var into any = &a.tk
		if kind == kindChallenge {
			into = &a.ch
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(into); err != nil {
			drain(resp.Body)
			if ctx.Err() != nil {
				return a, false
			}
			a.code = -1
			r.addError(errDecode)
			return a, true
		}
	case a.code >= 400:
		a.problem = readProblem(resp.Body)
		expected = a.code == http.StatusGone || (a.code == http.StatusNotFound && kind != kindJoin)
	default:
		expected = kind == kindLeave && a.code/100 == 2
	}
	drain(resp.Body)
	done := time.Now()
	lat := done.Sub(a.sent).Microseconds()
	switch kind {
	case kindJoin:
		r.joinLatency.record(lat)
		if a.code == http.StatusOK || a.code == http.StatusCreated {
			atomicMax(&r.lastJoinDone, done.UnixNano())
		}
	case kindStatus:
		r.statusLatency.record(lat)
	}
	if !expected {
		r.addError(strconv.Itoa(a.code))
	}
	if a.code == http.StatusOK || a.code == http.StatusCreated {
		if kind == kindJoin || kind == kindStatus {
			r.observe(target, a.tk, sentMax)
		}
	}
	return a, true
}

// observe applies the FIFO checks to one ticket answer and raises maxServing.
func (r *runner) observe(target string, tk ticket, sentMax int64) {
	switch {
	case tk.Status == statusAdmitted && tk.Number > tk.Serving:
		r.violation(FIFOExample{
			Kind: "admitted_above_serving", Target: target, TicketID: tk.TicketID,
			Status: tk.Status, Number: tk.Number, Serving: tk.Serving, MaxServingAtSend: sentMax,
		})
	case tk.Status == statusQueued && tk.Number <= sentMax:
		r.violation(FIFOExample{
			Kind: "queued_at_or_below_serving_seen", Target: target, TicketID: tk.TicketID,
			Status: tk.Status, Number: tk.Number, Serving: tk.Serving, MaxServingAtSend: sentMax,
		})
	}
	atomicMax(&r.maxServing, tk.Serving)
}

func (r *runner) violation(ex FIFOExample) {
	r.mu.Lock()
	r.fifo.count++
	if len(r.fifo.examples) < maxFIFOExamples {
		r.fifo.examples = append(r.fifo.examples, ex)
	}
	r.mu.Unlock()
}

func (r *runner) addError(key string) {
	r.errorsTotal.Add(1)
	r.mu.Lock()
	r.errors[key]++
	r.mu.Unlock()
}

func (r *runner) addTerminal(key string) {
	r.mu.Lock()
	r.terminal[key]++
	r.mu.Unlock()
}

func readProblem(body io.Reader) problem {
	var p problem
	_ = json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(&p)
	return p
}

// drain reads what is left of a body (up to a bound, so that a huge body cannot stall a user)
// and closes it, so that the connection can be reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}

func atomicMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

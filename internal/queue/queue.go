// Package queue holds the domain of the waiting room: event configuration, tickets and their
// statuses, the Store interface that every backend implements, and the sentinel errors the
// HTTP layer maps to problem codes.
//
// The line is modelled as a serving counter, not as a list of members:
//
//   - every join takes the next ticket number from a per-event sequence (strictly increasing,
//     assigned by the store, so there are no ties and no server clock is involved);
//   - serving is the highest number admitted so far; a ticket with number <= serving has been
//     admitted (or passed over because it left), a ticket above it is waiting;
//   - admitting a batch of k moves serving forward past k present tickets: O(1) in the batch
//     size, plus O(log N) per ticket that left the line inside the batch;
//   - the only per-ticket records are those of tickets that left while waiting (a sorted set
//     used to count people ahead), of claimed admitted sessions (bounded by max_active), of
//     named users (user -> number), and two bits per ticket once it has ended.
//
// A waiting anonymous ticket therefore costs no memory in the store at all.
//
// Places. The serving counter counts places in line, not ticket numbers. A ticket's place is
// its number, except in a drawn pre-queue (EventConfig.DrawSeed): at the line's opening (its
// first step at or after OpensAt) the N tickets that joined before it are put in the order of
// the keyed permutation of package draw, ticket number n <= N standing at place
// draw.Place(n); tickets joining later keep place = number (> N), behind the draw. Until the
// opening such a ticket has no place yet (Ticket.Place 0, Position 0). Everything that orders
// the line (serving, admission batches, tickets that left while waiting, sell-out ranges) is
// kept in places; everything that names a ticket (marks, sessions, users) by number. See
// docs/draw.md.
package queue

import (
	"context"
	"errors"
	"time"
)

// Status is the state of a ticket as reported to its holder.
type Status string

// Ticket statuses.
const (
	StatusQueued    Status = "QUEUED"    // waiting in line (or in the pre-queue before opens_at)
	StatusAdmitted  Status = "ADMITTED"  // admitted session live until AdmittedUntil
	StatusExpired   Status = "EXPIRED"   // admitted, then the session ended (unclaimed or idle)
	StatusClosed    Status = "CLOSED"    // the event closed while the ticket was waiting
	StatusSoldOut   Status = "SOLD_OUT"  // the event sold out while the ticket was waiting
	StatusCompleted Status = "COMPLETED" // the admitted session ended with a booking
)

// Terminal reports whether no further change of the status is possible.
func (s Status) Terminal() bool {
	return s != StatusQueued && s != StatusAdmitted
}

// Sentinel errors returned by Store implementations, wrapped with %w.
var (
	ErrEventNotFound  = errors.New("event not found")
	ErrTicketNotFound = errors.New("ticket not found")
	ErrEventClosed    = errors.New("event closed")
	ErrSoldOut        = errors.New("event sold out")
	ErrNotAdmitted    = errors.New("ticket holds no live admission")
)

// EventConfig is the part of an event's configuration that the line store enforces, made by
// event.Event.LineConfig from a validated configuration (the ranges and defaults live there).
// Durations are whole milliseconds once stored; zero times mean "not set".
type EventConfig struct {
	ID string
	// MaxActive is the number of admitted sessions allowed at once (>= 1).
	MaxActive int64
	// AdmitRate is the number of new admissions per second, join-time admissions included
	// (0 = bounded by MaxActive only). Enforced as a token bucket holding at most a tenth of a
	// second's worth of admissions (at least one), refilled continuously.
	AdmitRate float64
	// SessionTTL is how long an admitted session lasts after its last activity.
	SessionTTL time.Duration
	// ClaimTTL is how long a ticket admitted by the processor has to fetch its admission.
	ClaimTTL time.Duration
	// OpensAt: before it, tickets join the pre-queue and nobody is admitted. Zero = open.
	OpensAt time.Time
	// ClosesAt: from it on, joins fail with ErrEventClosed and waiting tickets read CLOSED.
	ClosesAt time.Time
	// Paused stops admissions (at join and by the processor); joins still queue.
	Paused bool
	// SessionMax ends an admitted session this long after its admission whatever its activity
	// (its expiry never moves past admission + SessionMax). Zero = no such limit.
	SessionMax time.Duration
	// Version orders configurations of one event (event.Event.Version, a counter kept in SQL):
	// the store keeps the newest it was given, so a slow writer never reverts a newer change.
	Version int64
	// Auto: the event's limits are its controller's (admission mode auto, package autoadmit).
	// MaxActive and AdmitRate then only start a new line, or a line whose controller never
	// set limits: once SetControl set them, a configuration keeps them. Without Auto a
	// configuration's MaxActive and AdmitRate apply and forget the controller's.
	Auto bool
	// DrawSeed (draw.SeedLen bytes) draws the order of the pre-queue at the opening
	// (prequeue_order "random"); nil keeps arrival order. It counts only until the line's
	// opening: then the draw is made (or not) once for the line's life, and later changes of
	// DrawSeed or OpensAt reorder nobody.
	DrawSeed []byte
}

// Stats are an event's live counters.
type Stats struct {
	Generation    uint32
	Waiting       int64   // tickets in line (pre-queue included)
	Active        int64   // admitted sessions holding a slot (claimed or still claimable)
	AdmittedTotal int64   // admissions since the line was created
	Serving       int64   // highest ticket number admitted or passed over
	LastNumber    int64   // highest ticket number given out
	Rate          float64 // recent admissions per second (moving average; 0: none measured yet), for ETAs (event.ETA)
	SoldOut       bool
	Now           time.Time // the store's clock when read
	// DrawPending: the line has a pre-queue whose order is to be drawn at its opening (not
	// reached yet); its tickets have no place yet.
	DrawPending bool
	// DrawN is the number of tickets drawn at the opening (numbers 1..DrawN), and DrawSeed the
	// seed of that draw; DrawSeed is nil unless the line has opened with a draw (DrawN may be
	// 0 then: nobody joined before the opening).
	DrawN    int64
	DrawSeed []byte
	// VoidFrom and VoidTo bound the void numbers of the line's last resume after a store loss
	// (docs/durability.md): numbers that may have been handed out before the loss, skipped by
	// positions and admissions until their holder shows up (a Status call of the ticket). A
	// push hub checks its connections in the range at once, so that their holders keep their
	// places instead of being passed over. 0 and 0 when the line has none.
	VoidFrom, VoidTo int64
	// VoidLeft is how many of the void numbers of the line's last resume are still void:
	// nobody knows whether they were handed out. LastNumber less VoidLeft is the tickets known
	// to be given out (history.GivenOut, the report's arrivals); a holder who shows up makes
	// its number known.
	VoidLeft int64
	// Owed are the holders of void numbers the serving counter passed who showed up when the
	// room was full, waiting for a slot ahead of the line (counted in Waiting; the admission
	// steps admit them first, within MaxActive): their numbers, in the order they showed up.
	Owed []int64
	// LeftWaiting and Unclaimed are running totals of the line (its generation's, kept in the
	// store, counted in the atomic step that makes them; they start at 0 again with a new line
	// and after a store loss): tickets that left while waiting (queued, in the pre-queue
	// included), and admissions that ended unclaimed at their claim deadline (the person was
	// gone when their turn came). What the operator's report calls abandonment and "admitted
	// who never came".
	LeftWaiting, Unclaimed int64
}

// ViewLeftMax is the most places of tickets that left while waiting a View lists.
const ViewLeftMax = 4096

// View is a line as one step of the store saw it, for answering the status of a waiting
// ticket far from the front without a store call (line.Service.Poll): Stats, and
//
//   - Plain: every waiting ticket numbered above DrawN has its number as its place and the
//     position place − Serving − (places in Left below its own): the line's opening is
//     settled (and its draw's
//     leavers scored), it has no closing time set in the store, no pending range and no void
//     numbers of a resume, and is not sold out. A status read of such a ticket returns
//     exactly what status.lua's hot path (or memstore's status) would at this step.
//   - Left: the places above Serving whose tickets left while waiting, ascending, complete
//     when LeftAll (at most ViewLeftMax of them); nil and LeftAll false when more.
//   - MaxActive and AdmitRate: the line's limits as the store holds them (admissions per
//     second, 0 = bounded by MaxActive only), which bound how far Serving can move.
//   - Over: the tickets of ViewParams.Polls whose reads in the current window of
//     polls_per_ticket are past ViewParams.Limit, and OverFor the time until that window ends.
type View struct {
	Stats
	Plain     bool
	Left      []int64
	LeftAll   bool
	MaxActive int64
	AdmitRate float64
	Over      []int64
	OverFor   time.Duration
}

// ViewParams is the input of Store.View.
type ViewParams struct {
	Event string
	// Polls are reads of tickets of line Generation answered from an earlier view, counted in
	// the same count as PollParams' (Limit reads per fixed Window, exact across instances):
	// none is refused (they were answered), but View.Over names the tickets past the limit.
	// Reads of another generation are not counted (those tickets are gone).
	Generation uint32
	Polls      []PollCount
	Limit      int64
	Window     time.Duration
}

// PollCount is a ticket's reads (by number) to count.
type PollCount struct{ Number, Count int64 }

// JoinParams is the input of Store.Join.
type JoinParams struct {
	Event string
	// UserKey names a vouched-for user (a fixed-size digest of the user id, see token.UserKey);
	// empty for an anonymous join. The same UserKey gets the same live ticket back.
	UserKey string
	// IdempotencyKey names this join attempt (a fixed-size digest of the client's
	// Idempotency-Key, see token.IdempotencyKey); empty for none. A join with a key seen in the
	// last IdempotencyWindow to 2 x IdempotencyWindow gets the ticket the first made back while
	// it is live (Created false), so a retry after a lost answer takes no second place.
	IdempotencyKey string
	// ClientKey names the client the join comes from (its address, see package clientaddr);
	// with JoinLimit > 0, the store refuses the join with a *RateLimitedError (RetryAfter: until
	// the client's next join passes) when the client's token bucket for this event is empty:
	// a bucket of JoinLimit joins, refilled at JoinLimit per JoinWindow, so a client may join
	// JoinLimit times at once and then once per JoinWindow / JoinLimit, and at most JoinLimit +
	// JoinLimit x T / JoinWindow times in any span T (GCRA; refused joins use nothing). Only
	// a join that may make a new ticket is counted or refused: one answered with a live ticket
	// that exists already (its user's, its idempotency key's) is neither, so the retry of a
	// join whose answer was lost gets its ticket back whatever the bucket holds; a RetryOnly
	// join is never counted. A change of JoinLimit or JoinWindow starts every client's bucket
	// afresh. Empty: not limited.
	ClientKey string
	// JoinLimit is the size of a client's bucket of joins and its refill per JoinWindow (0 =
	// not limited; JoinLimit x JoinWindow in ms at most MaxJoinSpan, else not limited).
	JoinLimit int64
	// JoinWindow is the time in which a client's bucket refills JoinLimit joins (whole
	// milliseconds, > 0 when JoinLimit is).
	JoinWindow time.Duration
	// TicketLimit caps the tickets ClientKey may make in the line's pre-queue (0 = no cap;
	// nothing is capped without a ClientKey): before the line's opening (OpensAt, by the
	// store's clock), a join that would make a new ticket is refused with a
	// *RateLimitedError whose RetryAfter is the time until the opening, taking no number, once
	// the client made TicketLimit tickets of the pre-queue. Counted in the same atomic step as
	// the join, so it holds across instances; a join answered with a live ticket that exists
	// already (a user's, an idempotent retry's) is neither refused nor counted; a ticket that
	// left still counts. The refused join was counted against JoinLimit (it reached the line).
	// From the opening on nothing is counted or refused, and the counts are forgotten.
	TicketLimit int64
	// ChallengeID names the single-use proof the join carries: a proof-of-work challenge's id,
	// a captcha token's digest ("" = none; at most 64 bytes). A join that makes a new ticket
	// records it until ChallengeExpires plus ChallengeGrace, by the store's clock, in the same
	// atomic step, and fails with ErrChallengeUsed, taking no number, when it was recorded
	// before. A join answered with a live ticket that exists already (the user's, or the one
	// its idempotency key made) records nothing, so a retry with the same proof gets its ticket
	// back.
	ChallengeID string
	// ChallengeExpires is when the proof stops being valid (whole milliseconds).
	ChallengeExpires time.Time
	// CountOnly: the join was refused before the store (its proof failed, package line): it
	// only takes one join from the client's bucket (ClientKey, JoinLimit, JoinWindow) in the
	// store's step, so that a refusal costs what a join costs, exact across instances. It makes
	// nothing and counts nothing else: Join returns the zero Ticket and nil, or a
	// *RateLimitedError when the bucket is empty, or the event's own errors (ErrEventNotFound,
	// ErrEventClosed, ErrSoldOut). UserKey, IdempotencyKey, the challenge and TicketLimit are
	// ignored.
	CountOnly bool
	// RetryOnly: the join may only be answered with a live ticket that exists already (the
	// user's, or the one its idempotency key made), else ErrChallengeUsed: for the retry of a
	// join whose proof can no longer be checked (a captcha token is single use at its
	// service). ChallengeID is ignored.
	RetryOnly bool
}

// PollParams is the input of Store.Poll.
type PollParams struct {
	Ref TicketRef
	// Limit is the reads one ticket may make per Window (0 = not limited). The count is kept
	// per ticket number and event, in fixed windows aligned on the Unix epoch (of the store's
	// clock); refused reads count too (which changes nothing: they are over already).
	Limit int64
	// Window is the fixed window of Limit (whole milliseconds, > 0 when Limit is).
	Window time.Duration
}

// AdmitStep is the admission processor's interval: every instance steps each event's line
// this often (package admission), and the admit_rate bucket holds one step's worth.
const AdmitStep = 100 * time.Millisecond

// AdmitLateMax is how much of admit_rate an admission step may hold beyond the bucket's tenth
// of a second: what earlier steps could not take because they came late (every instance's
// steps starved of CPU, or the store slow to answer) or were cut short (a batch cap, the
// serving ceiling) is made up, so that the line keeps admit_rate over time (issue 22: 4
// instances beside a crowd on 2 cores stepped every ~185 ms and moved the line at 1,110/s of
// 2,000). A step that admits everyone it could (no other free slot, nobody else waiting, or
// the line shut) keeps no more than the bucket, so that time when nobody else could be
// admitted is never made up: a burst beyond the bucket only follows steps that fell behind.
const AdmitLateMax = time.Second

// RateEvents and RateSpan close a window of the admission rate ETAs read (Stats.Rate, a
// moving average of windows, each folded in with weight 0.3): a window closes after a second
// once it holds RateEvents admissions, or once it spans RateSpan, or once the rate so far would
// have made twice RateEvents in it (the pace fell: a line that stops is seen within seconds).
// A window of one second at a slow pace holds one admission or none: one admission 30 s after
// the room filled read as 1 a second, an ETA of 19 s for a wait of ~570 s, and the average
// swung between seconds and the turnover after each admission (helper-83).
const (
	RateEvents = 5
	RateSpan   = 30 * time.Second
)

// ChallengeGrace is how long past its expiry a used challenge is remembered: the margin for the
// clocks of the instances that check expiries and of the store that forgets them.
const ChallengeGrace = time.Minute

// ErrChallengeUsed refuses a join whose single-use proof made a ticket already (or, with
// RetryOnly, a join that would make a ticket).
var ErrChallengeUsed = errors.New("challenge used already")

// IdempotencyWindow is the least time a join's idempotency key is remembered (at most twice
// that). Retries come within seconds (the page and crowd retry a failed join at once, with
// back-off); each key costs the store ~70 bytes for that long.
const IdempotencyWindow = 30 * time.Second

// ErrRateLimited is the sentinel of RateLimitedError (errors.Is).
var ErrRateLimited = errors.New("rate limited")

// MaxJoinSpan bounds JoinParams.JoinLimit x JoinWindow (in ms): the stores keep a client's
// bucket in units of JoinWindow / JoinLimit ms, exact in a float64 (Redis Lua's numbers) up to
// twice this. event.Limits stay below it (10^9 joins per hour: 3.6 x 10^15).
const MaxJoinSpan = 1 << 52

// RateLimitedError refuses a call over a limit per client; RetryAfter is when a call passes
// again (the window's end, the next join of the client's bucket, or the opening), by the
// store's clock.
type RateLimitedError struct {
	RetryAfter time.Duration
	// Prequeue: the join was refused for JoinParams.TicketLimit (the client's tickets of the
	// pre-queue); RetryAfter is the time until the opening.
	Prequeue bool
}

func (e *RateLimitedError) Error() string {
	return "rate limited: retry after " + e.RetryAfter.String()
}

// Is makes errors.Is(err, ErrRateLimited) hold.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// TicketRef names one ticket: its event, the line generation it was issued in, and its number.
type TicketRef struct {
	Event      string
	Generation uint32
	Number     int64
}

// Ticket is a ticket's state as the store saw it in one atomic step.
type Ticket struct {
	TicketRef
	Status Status
	// Created is true when Join made a new ticket, false when it returned the user's live one.
	Created bool
	// Position is 1-based (people ahead + 1) while queued, else 0; 0 as well while the ticket
	// waits in a pre-queue whose order is not drawn yet (Place 0).
	Position int64
	// Place is the ticket's place in line, in the serving counter's terms: Number, or the
	// drawn place of a ticket of the opening's draw; 0 while that draw is pending.
	Place   int64
	Waiting int64
	Serving int64
	// AdmittedUntil is when the admitted session ends without further activity (zero unless admitted).
	AdmittedUntil time.Time
	// Rate is the event's recent admissions per second (Stats.Rate), for ETAs.
	Rate float64
	// Now is the store's clock at the step.
	Now time.Time
	// UserKey is the user key the ticket was joined with (JoinParams.UserKey), given for an
	// ADMITTED ticket ("" for an anonymous one, or when not admitted): the admission token
	// carries it so that the sale can cap a user's purchases.
	UserKey string
}

// AdmitResult reports one admission step of one event.
type AdmitResult struct {
	Admitted int64 // tickets admitted by this step
	// From..To is the range of places the serving counter moved over (To = new serving);
	// places in it whose ticket had left are skipped, so Admitted <= To-From+1. Zero when
	// none. A place is the ticket number outside a drawn pre-queue (see the package doc).
	From, To int64
	Expired  int64 // admitted sessions ended by this step (idle or unclaimed)
	Now      time.Time
}

// Store keeps the lines of all events. Every method is one atomic step on the shared state.
// Implementations: memstore (in-process) and redisstore (Redis and Redis Cluster).
type Store interface {
	// PutEvent creates or updates an event's configuration. A new line starts with the given
	// generation, on a clean slate; an existing line keeps its own, and ignores a configuration
	// whose Version is older than the one it has. Generation 0 only updates: it returns
	// ErrEventNotFound when the line does not exist. It returns the line's generation.
	PutEvent(ctx context.Context, cfg EventConfig, generation uint32) (uint32, error)
	// DeleteEvent removes the event and its whole line. Deleting an absent event is not an error.
	DeleteEvent(ctx context.Context, event string) error
	// Stats returns the event's counters, or ErrEventNotFound.
	Stats(ctx context.Context, event string) (Stats, error)
	// View returns the event's counters with what an instance needs to tell a waiting
	// ticket its position without a store call (View), and counts the polls answered from
	// an earlier view (ViewParams.Polls), in one step; ErrEventNotFound.
	View(ctx context.Context, p ViewParams) (View, error)
	// Join admits at once when a slot and an admission are free, the event is open and nobody
	// waits ahead; otherwise it appends to the line. Errors: ErrEventNotFound, ErrEventClosed.
	Join(ctx context.Context, p JoinParams) (Ticket, error)
	// Status reads a ticket and counts as activity: it claims an admission waiting to be
	// claimed and extends a live admitted session by the session TTL.
	// Errors: ErrEventNotFound, ErrTicketNotFound (unknown, other generation, or left).
	Status(ctx context.Context, ref TicketRef) (Ticket, error)
	// Poll is Status as the ticket's holder asks for it: the read also counts against
	// p.Limit reads of the ticket per p.Window, checked in the same atomic step (so the limit
	// holds across instances sharing the store); over it, the read is not made (it counts as
	// no activity) and Poll returns a *RateLimitedError telling when the window ends.
	// Errors: those of Status.
	Poll(ctx context.Context, p PollParams) (Ticket, error)
	// Leave removes a ticket from the line or ends its admitted session, freeing the slot at
	// once. Errors: ErrEventNotFound, ErrTicketNotFound (unknown or already left).
	Leave(ctx context.Context, ref TicketRef) error
	// Admit ends idle and unclaimed sessions, then admits the head of the line into free slots,
	// at most maxBatch tickets, within max_active and the admit_rate token bucket.
	Admit(ctx context.Context, event string, maxBatch int64) (AdmitResult, error)
	// SetSoldOut marks the event sold out: every waiting ticket is passed over at once and
	// reads SOLD_OUT for good, joins fail with ErrSoldOut and nobody is admitted. With false,
	// the sale reopens for new joins. It returns how many waiting tickets were passed over.
	SetSoldOut(ctx context.Context, event string, soldOut bool) (int64, error)
	// Complete ends an admitted session with a sale: the ticket reads COMPLETED and its slot is
	// freed. Completing a completed ticket is not an error.
	// Errors: ErrEventNotFound, ErrTicketNotFound, ErrNotAdmitted.
	Complete(ctx context.Context, ref TicketRef) error
	// Extend gives every live admitted session d more (claimed sessions' expiry and claimable
	// admissions' claim deadline). It returns how many sessions it extended.
	// Errors: ErrEventNotFound.
	Extend(ctx context.Context, event string, d time.Duration) (int64, error)
}

// SeqMark is the number a checkpoint may record as handed out (LineRecord.SeqMark), with every
// number up to it: LastNumber, but while void numbers of a resume remain (VoidLeft) ahead of
// the serving counter, the last number before them. A mark past them would have the next
// resume take them for tickets given out: after two losses in a row, the first's ~1,000 void
// numbers came back as waiting tickets nobody holds, each taking a slot when admitted
// (helper-83). The tickets joined since the resume are then void at the next one too, until
// their holders show up, as the first resume's were. Once serving has passed the void range,
// a resume knows every number below serving anyway (a step never reserves serving past the
// last number), and the mark is LastNumber again.
func (s Stats) SeqMark() int64 {
	if s.VoidLeft > 0 && s.VoidFrom > 0 && s.Serving < s.VoidTo {
		return min(s.LastNumber, s.VoidFrom-1)
	}
	return s.LastNumber
}

// FromMS converts Unix milliseconds, the stores' unit of time, to a UTC time.
func FromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// LineRecord is the durable record of an event's line numbers, kept outside the line store
// (in SQL) so that a store that loses data — a Redis restarted empty, a failover to a replica
// missing the last writes, an older snapshot — never hands out a number twice and keeps the
// meaning of the numbers it handed out (docs/durability.md).
type LineRecord struct {
	// Generation is the line generation ticket ids carry (never 0); kept across a loss.
	Generation uint32
	// SeqCeiling: the store hands out ticket numbers up to it and no further without first
	// raising it here (a hi-lo allocator): after a loss, numbers resume above it.
	SeqCeiling int64
	// ServingCeiling: the serving counter never passes it without first raising it here, and
	// an admission step raises it to exactly the place it admits up to (no block ahead): after
	// a loss, every ticket up to it may have been told it was admitted, and none above it.
	ServingCeiling int64
	// SeqMark and ServingMark are the last figures the store reported (checkpoints, about
	// every second): numbers up to SeqMark were handed out for sure; tickets up to ServingMark
	// were admitted or passed over.
	SeqMark, ServingMark int64
	// DrawN is N, the tickets the opening's draw permuted (docs/draw.md): tickets 1..N stand
	// at the draw's places, later ones at their numbers. Recorded once, when the store settles
	// the opening and before anybody is told a drawn position or admitted, so that a line
	// resumed after a loss keeps its draw. 0: no draw recorded (none made, or not yet).
	DrawN int64
	// DrawVoid are the numbers the draw permuted that were void when it was made (a loss
	// before the opening: see Numbers.Draw), ascending; recorded with DrawN.
	DrawVoid []int64
	// Owed are the numbers of the owed queue at the last checkpoint (Stats.Owed), ascending:
	// a resume keeps them void, so that their holders are owed their admission again.
	Owed []int64
}

// Numbers keeps the LineRecords (sqlstore.DB). Implementations are safe for concurrent use
// by many instances: every write only raises a figure (GREATEST), so racing writers agree.
type Numbers interface {
	// Line returns the event's record, creating it (with a random generation and all figures
	// 0) if absent.
	Line(ctx context.Context, event string) (LineRecord, error)
	// Reserve raises the ceilings to at least seq (rounded up to a multiple of SeqAlign) and
	// serving and returns the record after the write (creating it as Line does if absent).
	Reserve(ctx context.Context, event string, seq, serving int64) (LineRecord, error)
	// Mark raises the checkpoints to at least seq and serving.
	Mark(ctx context.Context, event string, seq, serving int64) error
	// Draw records n (>= 1) as the line's DrawN unless one is recorded already (the first
	// wins: a line draws once), with void (ascending, distinct, within 1..n; nil: none): the
	// numbers of the last resume still void at the draw (no holder showed up since). They drew
	// places nobody holds: a line resumed after a later loss keeps them void (skipped until
	// their holder shows up), where it takes every other number up to N for a ticket handed
	// out.
	Draw(ctx context.Context, event string, n int64, void []int64) error
}

// SeqBlock is the smallest block of the hi-lo allocator: how far the seq ceiling is raised
// past the number that needed it on a quiet line (a busy one reserves its pace's PaceHorizon,
// see Pace). A store keeps the seq ceiling at least half a block ahead (the admission processor
// tops it up), so a join rarely waits for the database, and a database outage stops joins only
// after half a block. After a loss the store resumes above the ceiling: at most 1.5 blocks of
// numbers are skipped (they cost no wait: see docs/durability.md). The serving ceiling has no
// block: an admission step raises it to exactly what it admits, before it admits.
const (
	SeqBlock = 1024
	// SeqAlign: seq ceilings are multiples of it, so a join checks the ceiling only on the
	// first number of each run of SeqAlign (lua/join.lua's hot path).
	SeqAlign = 64
)

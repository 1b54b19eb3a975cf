package redisstore

import (
	"embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Script result codes. Every script replies with an integer code first; a negative one is an
// error. This table is their one definition: each script gets it as Lua constants of the same
// names (luaCodes, prepended to every script), so the two sides cannot drift.
const (
	codeEventNotFound    = -1  // no line for the event
	codeTicketNotFound   = -2  // unknown ticket, another generation, or it left
	codeEventClosed      = -3  // closes_at has passed
	codeSoldOut          = -4  // the event sold out
	codeNotAdmitted      = -5  // the ticket holds no live admitted session
	codeSeatsNeeded      = -9  // PutInventory: the seat list must be sent
	codeNoInventory      = -10 // the event sells nothing here
	codeNotReady         = -11 // the inventory waits for its sold state
	codeTooMany          = -12 // {code, max per booking}
	codeUnknownSeats     = -13 // {code, seat...}
	codeConflict         = -14 // {code, available, seat...}
	codeWrongKind        = -15 // seats on a general-admission event, or a quantity on a seated one
	codeHoldNotFound     = -20
	codeHoldNotYours     = -21
	codeHoldExpired      = -22
	codeCampaignNotFound = -30
	codeNotOpen          = -31 // {code, opens ms}
	codeEntryNotFound    = -32
	codeRateLimited      = -40 // {code, ms until the client's window ends}
	codeNeedCeiling      = -41 // {code, seq, serving}: the line reached its durable ceiling ({code, seq, incarnation, ceiling}: a campaign)
	codeChallengeUsed    = -42 // the join's single-use challenge made a ticket already
	codeCounted          = -43 // a refused join (queue.JoinParams.CountOnly) taken from the client's bucket
	codeDrawMoved        = -50 // {code, generation, N, seed hex}: the caller's N is not the draw's
	codeNeedPlace        = -51 // {code, generation, N, seed hex, number}: join needs that ticket's place
	codeDrawLeft         = -52 // {code, generation, N, seed hex}: score the draw's leavers by place first
)

// scriptCodes names every code for the Lua side and maps the plain ones to their errors (nil:
// the caller reads the reply's extra values and builds the error itself).
var scriptCodes = []struct {
	name string
	code int64
	err  error
}{
	{"EVENT_NOT_FOUND", codeEventNotFound, queue.ErrEventNotFound},
	{"TICKET_NOT_FOUND", codeTicketNotFound, queue.ErrTicketNotFound},
	{"EVENT_CLOSED", codeEventClosed, queue.ErrEventClosed},
	{"SOLD_OUT", codeSoldOut, queue.ErrSoldOut},
	{"NOT_ADMITTED", codeNotAdmitted, queue.ErrNotAdmitted},
	{"SEATS_NEEDED", codeSeatsNeeded, nil},
	{"NO_INVENTORY", codeNoInventory, sale.ErrNoInventory},
	{"NOT_READY", codeNotReady, sale.ErrNotReady},
	{"TOO_MANY", codeTooMany, nil},
	{"UNKNOWN_SEATS", codeUnknownSeats, nil},
	{"CONFLICT", codeConflict, nil},
	{"WRONG_KIND", codeWrongKind, &sale.InvalidError{Reason: "a seated event holds seats, a general-admission event a quantity"}},
	{"HOLD_NOT_FOUND", codeHoldNotFound, sale.ErrHoldNotFound},
	{"HOLD_NOT_YOURS", codeHoldNotYours, sale.ErrHoldNotYours},
	{"HOLD_EXPIRED", codeHoldExpired, sale.ErrHoldExpired},
	{"CAMPAIGN_NOT_FOUND", codeCampaignNotFound, coupon.ErrCampaignNotFound},
	{"NOT_OPEN", codeNotOpen, nil},
	{"ENTRY_NOT_FOUND", codeEntryNotFound, coupon.ErrEntryNotFound},
	{"RATE_LIMITED", codeRateLimited, nil},
	{"NEED_CEILING", codeNeedCeiling, nil},
	{"CHALLENGE_USED", codeChallengeUsed, queue.ErrChallengeUsed},
	{"COUNTED", codeCounted, nil},
	{"DRAW_MOVED", codeDrawMoved, nil},
	{"NEED_PLACE", codeNeedPlace, nil},
	{"DRAW_LEFT", codeDrawLeft, nil},
}

// codeErr maps a script's code to its error: nil for codes >= 0, the sentinel (with the
// event or campaign id where it names one) for the others.
func codeErr(id string, code int64) error {
	if code >= 0 {
		return nil
	}
	for _, c := range scriptCodes {
		if c.code != code || c.err == nil {
			continue
		}
		switch c.code {
		case codeEventNotFound, codeNoInventory, codeCampaignNotFound:
			return fmt.Errorf("%w: %s", c.err, id)
		}
		return c.err
	}
	return fmt.Errorf("redisstore: unexpected script code %d", code)
}

// luaCodes is the codes, and the constants the scripts share with Go (IDEM_MS:
// queue.IdempotencyWindow; SEQ_ALIGN: queue.SeqAlign; CHALLENGE_GRACE_MS: queue.ChallengeGrace;
// USER_BUCKETS: userBuckets; STEP_MS: queue.AdmitStep; LATE_MS: queue.AdmitLateMax;
// RATE_EVENTS, RATE_SPAN_MS: queue.RateEvents, RateSpan), as Lua statements of local constants (a few register loads per
// call: nothing next to a script's own work).
var luaCodes = func() string {
	names := make([]string, len(scriptCodes))
	values := make([]string, len(scriptCodes))
	for i, c := range scriptCodes {
		names[i], values[i] = c.name, strconv.FormatInt(c.code, 10)
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(values, ", ") + "\n" +
		"local IDEM_MS = " + strconv.FormatInt(queue.IdempotencyWindow.Milliseconds(), 10) + "\n" +
		"local SEQ_ALIGN = " + strconv.Itoa(queue.SeqAlign) + "\n" +
		"local CHALLENGE_GRACE_MS = " + strconv.FormatInt(queue.ChallengeGrace.Milliseconds(), 10) + "\n" +
		"local USER_BUCKETS = " + strconv.Itoa(userBuckets) + "\n" +
		"local STEP_MS = " + strconv.FormatInt(queue.AdmitStep.Milliseconds(), 10) + "\n" +
		"local LATE_MS = " + strconv.FormatInt(queue.AdmitLateMax.Milliseconds(), 10) + "\n" +
		"local RATE_EVENTS = " + strconv.Itoa(queue.RateEvents) + "\n" +
		"local RATE_SPAN_MS = " + strconv.FormatInt(queue.RateSpan.Milliseconds(), 10) + "\n"
}()

// commonMark is the line of a script after which its helper files are inserted (default:
// before the script). What comes before it is the script's hot path, which uses none of the
// helpers and so does not pay for defining them when it returns early (see lua/common.lua).
const commonMark = "\n--@common\n"

// hotIOMark and hotIOEndMark enclose join.lua's reads and writes of its hot path, which the
// batched join replaces with its own (joinBatchSource).
const (
	hotIOMark    = "--@hot-io\n"
	hotIOEndMark = "--@hot-io-end\n"
)

// source returns the text sent to Redis for lua/<name>.lua: the result codes and
// lua/prelude.lua, then the script with the helper files includes (in order) at its
// "--@common" line, or before it.
func source(name string, includes ...string) string {
	read := func(f string) string {
		b, err := luaFS.ReadFile("lua/" + f + ".lua")
		if err != nil {
			panic(err) // the files are compiled in: cannot happen
		}
		return string(b)
	}
	var helpers strings.Builder
	for _, f := range includes {
		helpers.WriteString(read(f))
		helpers.WriteByte('\n')
	}
	body := inlineHotIO(read(name))
	prelude := luaCodes + read("prelude")
	if head, tail, ok := strings.Cut(body, commonMark); ok {
		return prelude + head + "\n" + helpers.String() + tail
	}
	return prelude + helpers.String() + body
}

// inlineHotIO gives a script run on its own (join.lua) its --@hot-io block's calls as the
// redis.call each stands for, and drops the block: its local functions would be made on every
// call (three of them cost 1,700 instructions of ~94,000 a join), for nothing when no batch
// keeps copies. A function of the block written "local name = function(...)" up to a line
// "end" becomes a call of its function literal where it is called: made only on the path that
// calls it. A script without the block is returned as it is.
func inlineHotIO(body string) string {
	head, rest, ok := strings.Cut(body, hotIOMark)
	if !ok {
		return body
	}
	block, tail, ok := strings.Cut(rest, hotIOEndMark)
	if !ok {
		panic("redisstore: a --@hot-io block without its end") // compiled in: cannot happen
	}
	pairs := slices.Clone(hotIOInline)
	lits := hotIOLiterals(block)
	for name, lit := range lits {
		pairs = append(pairs, name+"(", "("+lit+")(")
	}
	// A literal that calls the block's functions (join_limit calls rl_window, rl_get, …) has
	// them made inline too: one level, which is all the block has.
	inner := strings.NewReplacer(pairs...)
	pairs = slices.Clone(hotIOInline)
	for name, lit := range lits {
		pairs = append(pairs, name+"(", "("+inner.Replace(lit)+")(")
	}
	return head + strings.NewReplacer(pairs...).Replace(tail)
}

// hotIOLiterals returns the functions of a --@hot-io block written "local name = function(...)"
// up to a line "end", by name: their function literals.
func hotIOLiterals(block string) map[string]string {
	fs := map[string]string{}
	for rest := block; ; {
		_, after, ok := strings.Cut(rest, "\nlocal ")
		if !ok {
			return fs
		}
		rest = after
		name, lit, ok := strings.Cut(rest, " = function(")
		if !ok || strings.ContainsAny(name, " \n") {
			continue
		}
		lit, rest, ok = strings.Cut(lit, "\nend\n")
		if !ok {
			panic("redisstore: a --@hot-io function without its end") // compiled in
		}
		fs[name] = "function(" + lit + "\nend"
		rest = "\n" + rest
	}
}

// hotFields are the fields of join.lua's first HMGET (ev_hot, ev_hot_rl, ev_hot_ch).
const hotFields = "'gen', 'srv', 'rt', 'rate', 'close', 'so', 'opened', 'ph'"

// hotIOInline is what each call of join.lua's --@hot-io block's one-line functions stands for
// (pairs of strings.NewReplacer).
var hotIOInline = []string{
	"ev_read(", "redis.call('HMGET', KEYS[1], ",
	"ev_hot()", "redis.call('HMGET', KEYS[1], " + hotFields + ")",
	"ev_hot_rl()", "redis.call('HMGET', KEYS[1], " + hotFields + ", 'rlw')",
	"ev_hot_ch()", "redis.call('HMGET', KEYS[1], " + hotFields + ", 'rlw', 'chb')",
	"ev_write(", "redis.call('HSET', KEYS[1], ",
	"left_count()", "redis.call('ZCARD', KEYS[2])",
	"ev_num(", "tonumber(",
	"seq_add(", "redis.call('HINCRBY', KEYS[1], 'seq', ",
	"seq_keep()", "",
	"rl_get(", "redis.call('HGET', ",
	"rl_set(", "redis.call('HSET', ",
	"rl_drop(", "redis.call('UNLINK', ",
	"rl_expire(", "redis.call('PEXPIRE', ",
}

// joinBatchSource is the text of the batched join (Store.Join, batch.go): join.lua's body made
// a function of its ARGV, run once per join of the batch in order, so that join.lua stays the
// one definition of a join. KEYS are join.lua's 13, and a 14th for joins with a challenge (the
// bucket of used challenges: such joins are batched with those of the same bucket). ARGV is the
// joins' arguments one after the other, each preceded by its count: c1, a1..ac1, c2, ... The
// reply is the batch's head (hot_reply in the text: {srv, rate, now ms, generation, k}, or 0
// when no join made one), then one element per join: join.lua's reply for it, or, for a new
// ticket on the hot path that shares the head, its number n alone, standing for join.lua's
// {1, n, n - k + 1, n - k + 1, srv, 0, rate, now, generation, 1, n}. The helpers (common.lua, pending.lua)
// are defined once per call, before the function, and Redis TIME is read once per call: the
// joins of a batch are one atomic step, at one time. So are the hot path's reads of the
// event's fields and of the count of tickets that left (join.lua's --@hot-io block): read by
// the first join that needs them, kept as the joins write them, dropped when a join takes the
// cold path (measured in docs/scaling.md: 14 % fewer instructions a join); and so are the
// limit's reads of a client's TAT, kept for the whole batch.
func joinBatchSource() string {
	b, err := luaFS.ReadFile("lua/join.lua")
	if err != nil {
		panic(err) // compiled in: cannot happen
	}
	head, rest, ok1 := strings.Cut(string(b), hotIOMark)
	block, tail, ok2 := strings.Cut(rest, hotIOEndMark)
	lits := hotIOLiterals(block)
	window, ok3 := lits["rl_window"]
	limit, ok4 := lits["join_limit"]
	if !ok1 || !ok2 || !ok3 || !ok4 || !strings.Contains(tail, commonMark) {
		panic("redisstore: join.lua lacks its --@hot-io block, its rl_window, its join_limit or its --@common line") // compiled in
	}
	// A join that takes the cold path may change any field and the tickets that left: the
	// batch's copies are dropped there, before it reads them again.
	body := head + "\n" + strings.Replace(tail, commonMark, "\nseq_keep()\nevc, evleft, evhot, evhotrl, evhotch = {}, nil, false, false, false\n", 1)
	// A new ticket's reply on the hot path is its number alone when the batch's head holds
	// the rest (hot_reply below).
	if !strings.Contains(body, hotReturn) {
		panic("redisstore: join.lua lacks its hot path's return " + hotReturn) // compiled in
	}
	body = strings.Replace(body, hotReturn, "return hot_reply(n, before, srv, rate, now, v[1])", 1)
	var helpers strings.Builder
	for _, f := range []string{"common", "pending"} {
		h, err := luaFS.ReadFile("lua/" + f + ".lua")
		if err != nil {
			panic(err)
		}
		helpers.Write(h)
		helpers.WriteByte('\n')
	}
	prelude, err := luaFS.ReadFile("lua/prelude.lua")
	if err != nil {
		panic(err)
	}
	return luaCodes + string(prelude) + `
-- The batch's one clock: Redis TIME read by its first join that needs it.
local time_ms, batch_now = now_ms, nil
local function now_ms(arg)
  local n = arg ~= '0' and tonumber(arg)
  if n and n > 0 then return n end
  if not batch_now then batch_now = time_ms('0') end
  return batch_now
end
-- The batch's copies of the event's fields its joins read and wrote on their hot path (evc:
-- field -> value, false for a field that is absent, as HMGET gives it) and of the count of
-- tickets that left (evleft), in place of join.lua's --@hot-io block: the batch is one atomic
-- step, so only its own joins change them, and a join's cold path drops them (--@common).
local evc, evleft = {}, nil
-- (v starts as the names, sized at once, and each is replaced by its value: a table grown one
-- entry at a time is rehashed at 1, 2, 4 and 8 entries.)
local function ev_read(...)
  local v = {...}
  for i = 1, #v do
    local x = evc[v[i]]
    if x == nil then
      local fs = {...}
      v = redis.call('HMGET', KEYS[1], ...)
      for j = 1, #fs do evc[fs[j]] = v[j] end
      return v
    end
    v[i] = x
  end
  return v
end
-- The tables of ev_hot, ev_hot_rl and ev_hot_ch (false: none yet, or a field was written since).
local evhot, evhotrl, evhotch = false, false, false
local function ev_hot()
  if not evhot then evhot = ev_read(` + hotFields + `) end
  return evhot
end
local function ev_hot_rl()
  if not evhotrl then evhotrl = ev_read(` + hotFields + `, 'rlw') end
  return evhotrl
end
local function ev_hot_ch()
  if not evhotch then evhotch = ev_read(` + hotFields + `, 'rlw', 'chb') end
  return evhotch
end
local function ev_write(f, x)
  redis.call('HSET', KEYS[1], f, x)
  evc[f] = tostring(x)
  evhot, evhotrl, evhotch = false, false, false
end
local function left_count()
  if not evleft then evleft = redis.call('ZCARD', KEYS[2]) end
  return evleft
end
-- The numbers of the values its joins read (value -> number, false for none), for ev_num.
local evnum = {}
local function ev_num(x)
  local n = evnum[x]
  if n == nil then
    n = tonumber(x) or false
    if x then evnum[x] = n end
  end
  return n or nil
end
-- The batch's copy of the line's last number (the ev field seq): read by its first join that
-- takes a number, moved by its joins, and written back (seq_keep) before a join's cold path
-- (which reads and writes the field itself), before a join writes an entry that names its
-- number (a named user's, an idempotency key's), and at the end of the batch: a number that
-- only a reply knows is never in the store, so a batch that fails part-way hands out nothing
-- twice. One HGET and one HSET a batch instead of an HINCRBY a join.
local seqn, seqw = nil, false
local function seq_add(d)
  if not seqn then seqn = tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0 end
  if d == '1' then seqn = seqn + 1 else seqn = seqn - 1 end
  seqw = true
  return seqn
end
local function seq_keep()
  if seqw then
    redis.call('HSET', KEYS[1], 'seq', string.format('%d', seqn))
    seqw = false
  end
  seqn = nil
end
-- The batch's copy of the last TAT its limit wrote (bucket rlk, client rlf, value rlx, a
-- number): the joins of one client that come together (one address behind a NAT or a carrier's
-- CGNAT, or the bench's load) read it from there, and it is written to the bucket once for the
-- run of them (rl_keep, "%d"): when another client's TAT is set, before the bucket's expiry is
-- set, and at the end of the batch; a drop of the bucket drops it. One entry, not a table: a
-- crowd's joins each from a client of its own would pay more for the table than they save.
-- Only join.lua's limit touches these keys.
local rlk, rlf, rlx, rlw = nil, nil, nil, false
local function rl_keep()
  if rlw then
    redis.call('HSET', rlk, rlf, string.format('%d', rlx))
    rlw = false
  end
end
local function rl_get(k, f)
  if k == rlk and f == rlf then return rlx end
  return redis.call('HGET', k, f)
end
local function rl_set(k, f, x)
  if k ~= rlk or f ~= rlf then rl_keep() end
  rlk, rlf, rlx, rlw = k, f, x, true
end
local function rl_drop(k)
  if k == rlk then rlk, rlw = nil, false end
  redis.call('UNLINK', k)
end
local function rl_expire(k, ms)
  if k == rlk then rl_keep() end
  redis.call('PEXPIRE', k, ms)
end
-- The limit's window (join.lua's rl_window), made once for the joins that share now, L and W.
local rl_window_of, rlwin = ` + window + `, {}
local function rl_window(now, l, w)
  if rlwin[1] ~= now or rlwin[2] ~= l or rlwin[3] ~= w then rlwin = {now, l, w, rl_window_of(now, l, w)} end
  return rlwin[4], rlwin[5], rlwin[6], rlwin[7]
end
-- join.lua's join_limit, made once for the batch, on the batch's reads and writes above.
local join_limit = ` + limit + `
-- The batch's head: what the replies of the new tickets its joins' hot paths make share,
-- {srv, rate, now, generation, n - before} (before: the tickets ahead of number n), set by the
-- first of them. Such a join's reply, join.lua's {1, n, before + 1, before + 1, srv, 0, rate,
-- now, generation, 1, n}, is then the integer n alone, unless it differs from the head in any
-- of those (it is the whole table then): Redis makes one integer of it instead of a table of 11
-- values, and the instance reads one.
local head = false
local function hot_reply(n, before, srv, rate, now, gen)
  if not head then head = {srv, rate, now, gen, n - before} end
  if head[1] == srv and head[2] == rate and head[3] == now and head[4] == gen and head[5] == n - before then
    return n
  end
  return {1, n, before + 1, before + 1, srv, 0, rate, now, gen, 1, n}
end
` + helpers.String() + "local function join_one(ARGV)\n" + body + "\nend\n" + `
local out, i, na = {false}, 1, #ARGV
while i <= na do
  local c = ev_num(ARGV[i]) -- (a count: the numbers of a few strings, kept)
  out[#out + 1] = join_one({unpack(ARGV, i + 1, i + c)})
  i = i + c + 1
end
seq_keep()
rl_keep()
out[1] = head or 0
return out
`
}

// hotReturn is join.lua's reply of a new ticket on its hot path, which the batch makes the
// number alone (hot_reply).
const hotReturn = "return {1, n, before + 1, before + 1, srv, 0, rate, now, v[1], 1, n}"

// JoinBatchSource returns the text of the batched join (joinBatchSource): the bench counts the
// instructions of its joins.
func JoinBatchSource() string { return joinBatchSource() }

// ScriptSource returns the text the store sends to Redis for the line script lua/<name>.lua
// (with common.lua, and sale_common.lua for those that release holds). The bench command loads
// it into redis-benchmark to measure the rate at which Redis runs it; with the line's 8 keys
// only (Keys), those scripts release no hold.
func ScriptSource(name string) string {
	switch {
	case name == "status":
		return source(name, "common", "pending", "sale_common")
	case releasesHolds[name]:
		return source(name, "common", "sale_common")
	case name == "join":
		return source(name, "common", "pending")
	}
	return source(name, "common")
}

// releasesHolds names the line scripts that release the hold of a ticket that left or whose
// session ended, and so take the sale's keys too.
var releasesHolds = map[string]bool{"status": true, "leave": true, "admit": true}

// Each script is wrapped once: EVALSHA, with a transparent EVAL on NOSCRIPT (a Redis restarted
// or a SCRIPT FLUSH).
var (
	joinScript      = rueidis.NewLuaScript(source("join", "common", "pending"))
	joinBatchScript = rueidis.NewLuaScript(joinBatchSource())
	statusScript    = rueidis.NewLuaScript(ScriptSource("status")) // with pending.lua: a reclaim may admit
	leaveScript     = rueidis.NewLuaScript(ScriptSource("leave"))
	admitScript     = rueidis.NewLuaScript(source("admit", "common", "sale_common", "pending"))
	putEventScript  = rueidis.NewLuaScript(source("put_event", "common", "pending", "server", "resume"))
	recoverScript   = rueidis.NewLuaScript(source("recover", "common", "pending", "server", "resume"))
	raiseScript     = rueidis.NewLuaScript(source("raise", "common"))
	statsScript     = rueidis.NewLuaScript(source("stats", "common"))
	soldOutScript   = rueidis.NewLuaScript(source("sold_out", "common"))
	completeScript  = rueidis.NewLuaScript(source("complete", "common"))
	extendScript    = rueidis.NewLuaScript(source("extend", "common"))
	drawLeftScript  = rueidis.NewLuaScript(source("draw_left", "common"))

	inventoryScript  = rueidis.NewLuaScript(source("inventory", "common", "sale_common"))
	restoreScript    = rueidis.NewLuaScript(source("restore", "common", "sale_common"))
	holdScript       = rueidis.NewLuaScript(source("hold", "common", "sale_common"))
	releaseScript    = rueidis.NewLuaScript(source("release", "common", "sale_common"))
	bookBeginScript  = rueidis.NewLuaScript(source("book_begin", "common", "sale_common"))
	bookEndScript    = rueidis.NewLuaScript(source("book_end", "common", "sale_common"))
	bookCommitScript = rueidis.NewLuaScript(source("book_commit", "common", "sale_common"))
	unsellScript     = rueidis.NewLuaScript(source("unsell", "common", "sale_common"))
	seatsScript      = rueidis.NewLuaScript(source("seats", "common", "sale_common"))

	couponPutScript     = rueidis.NewLuaScript(source("coupon_put", "coupon_common", "server"))
	couponEnterScript   = rueidis.NewLuaScript(source("coupon_enter", "coupon_common"))
	couponEntryScript   = rueidis.NewLuaScript(source("coupon_entry", "coupon_common"))
	couponTakeScript    = rueidis.NewLuaScript(source("coupon_take", "coupon_common"))
	couponRecordScript  = rueidis.NewLuaScript(source("coupon_record", "coupon_common"))
	couponStatsScript   = rueidis.NewLuaScript(source("coupon_stats", "coupon_common"))
	couponRaiseScript   = rueidis.NewLuaScript(source("coupon_raise", "coupon_common"))
	couponRecoverScript = rueidis.NewLuaScript(source("coupon_recover", "coupon_common", "server"))
	couponCheckScript   = rueidis.NewLuaScript(source("coupon_check", "coupon_common", "server"))
	couponRestoreScript = rueidis.NewLuaScript(source("coupon_restore", "coupon_common"))
	couponConfirmScript = rueidis.NewLuaScript(source("coupon_confirm", "coupon_common"))

	histAppendScript = rueidis.NewLuaScript(source("hist_append"))
	histAddScript    = rueidis.NewLuaScript(source("hist_add"))
	beatScript       = rueidis.NewLuaScript(source("beat"))
	leaseScript      = rueidis.NewLuaScript(source("lease"))
	countScript      = rueidis.NewLuaScript(source("count"))
	shareTakeScript  = rueidis.NewLuaScript(source("share_take"))
	shareGiveScript  = rueidis.NewLuaScript(source("share_give"))
	shareRenewScript = rueidis.NewLuaScript(source("share_renew"))
)

// errShortReply is returned for a reply that lacks a value the caller reads, or holds one of
// another type: a script and its Go side disagree (never a client's doing).
var errShortReply = errors.New("redisstore: malformed script reply")

// reply reads a script's reply with every index and type checked: a read past the end or of
// the wrong type records errShortReply (with the position) instead of panicking, and Err
// returns it. Reads after a failure return zero values.
type reply struct {
	v   []rueidis.RedisMessage
	err error
	// A new ticket's reply in a batch that the batch's head stands for (joinBatchSource): its
	// values are read from h and n, not v.
	h *batchHead
	n int64
}

// batchHead is the head of a batched join's reply (joinBatchSource): what the replies of its
// new tickets on the hot path share. k is n - before: a ticket's position is n - k + 1.
type batchHead struct {
	srv, now, k int64
	rate        float64
	gen         int64
}

// readHead reads a batched join's head: nil for 0 (no join made one).
func readHead(m rueidis.RedisMessage) (*batchHead, error) {
	if m.IsInt64() {
		return nil, nil
	}
	hr := readReply(m.ToArray())
	h := &batchHead{srv: hr.Int(0), rate: hr.Float(1), now: hr.Int(2), gen: hr.Int(3), k: hr.Int(4)}
	if hr.Len() != 5 {
		hr.fail(5, "the end")
	}
	return h, hr.Err()
}

// hotValue is value i of a reply h and n stand for: {1, n, n - k + 1, n - k + 1, srv, 0, rate,
// now, generation, 1, n} (rate is Float's alone).
func (r *reply) hotValue(i int) int64 {
	switch i {
	case 0, 9:
		return 1
	case 1, 10:
		return r.n
	case 2, 3:
		return r.n - r.h.k + 1
	case 4:
		return r.h.srv
	case 7:
		return r.h.now
	case 8:
		return r.h.gen
	}
	return 0
}

// hotLen is the length of the reply a batch's head stands for.
const hotLen = 11

// readReply wraps an array reply (err: the call's error, kept).
func readReply(v []rueidis.RedisMessage, err error) *reply {
	return &reply{v: v, err: err}
}

func (r *reply) fail(i int, what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: value %d of %d is not %s", errShortReply, i, len(r.v), what)
	}
}

// Len is the number of values.
func (r *reply) Len() int {
	if r.h != nil {
		return hotLen
	}
	return len(r.v)
}

// Int reads value i as an integer.
func (r *reply) Int(i int) int64 {
	if r.err != nil {
		return 0
	}
	if r.h != nil && i < hotLen {
		return r.hotValue(i)
	}
	if i >= len(r.v) {
		r.fail(i, "there")
		return 0
	}
	n, err := r.v[i].AsInt64()
	if err != nil {
		r.fail(i, "an integer")
	}
	return n
}

// Float reads value i as a number (an integer, or a string holding one).
func (r *reply) Float(i int) float64 {
	if r.err != nil {
		return 0
	}
	if r.h != nil && i < hotLen {
		if i == 6 {
			return r.h.rate
		}
		return float64(r.hotValue(i))
	}
	if i >= len(r.v) {
		r.fail(i, "there")
		return 0
	}
	f, err := r.v[i].AsFloat64()
	if err != nil {
		r.fail(i, "a number")
	}
	return f
}

// Str reads value i as a string (an integer reads as its decimal text).
func (r *reply) Str(i int) string {
	if r.err != nil {
		return ""
	}
	if r.h != nil && i < hotLen {
		if i == 6 {
			return strconv.FormatFloat(r.h.rate, 'g', -1, 64)
		}
		return strconv.FormatInt(r.hotValue(i), 10)
	}
	if i >= len(r.v) {
		r.fail(i, "there")
		return ""
	}
	if s, err := r.v[i].ToString(); err == nil {
		return s
	}
	if n, err := r.v[i].AsInt64(); err == nil {
		return strconv.FormatInt(n, 10)
	}
	r.fail(i, "a string")
	return ""
}

// Strs reads values i.. as strings.
func (r *reply) Strs(i int) []string {
	var out []string
	for ; i < r.Len() && r.err == nil; i++ {
		out = append(out, r.Str(i))
	}
	return out
}

// Code reads value 0, the script's result code.
func (r *reply) Code() int64 { return r.Int(0) }

// Err is the call's error, or the first malformed read.
func (r *reply) Err() error { return r.err }

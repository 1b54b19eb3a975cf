package app_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/captcha/captchatest"
	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestPowChallenge: an event with a proof-of-work challenge refuses joins without a solved,
// unused challenge of its own (401 challenge_required with the challenge URL, 403
// challenge_failed), takes a solved one once, gives an idempotent retry with the used
// challenge its ticket back, spares admin joins, and follows PATCHes of the challenge; on both
// backends (two instances on Redis: single use holds across them).
func TestPowChallenge(t *testing.T) { onBothBackends(t, testPowChallenge) }

// onBothBackends runs test on the embedded deployment (x = y) and on two instances sharing
// Redis and PostgreSQL (x, y); with sets the instances' other settings.
func onBothBackends(t *testing.T, test func(t *testing.T, x, y string), with ...func(*app.Config)) {
	configured := func(c app.Config) app.Config {
		for _, f := range with {
			f(&c)
		}
		return c
	}
	t.Run("embedded", func(t *testing.T) {
		in := start(t, configured(app.Config{DatabaseURL: sqltest.SQLite(t)}))
		test(t, in.srv.URL, in.srv.URL)
	})
	t.Run("redis, two instances", func(t *testing.T) {
		rc := redistest.Client(t)
		prefix := redistest.Prefix(t, rc)
		db := sqltest.Postgres(t)
		x := start(t, configured(app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix}))
		y := start(t, configured(app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix}))
		test(t, x.srv.URL, y.srv.URL)
	})
}

// solved fetches a challenge of event from base and solves it: the join body.
func solved(t *testing.T, base, event string) string {
	t.Helper()
	c := call(t, base, "GET", "/v1/events/"+event+"/challenge", "", "")
	require.Equal(t, 200, c.code, c.raw)
	sol, err := challenge.Solve(context.Background(), str(c, "challenge"))
	require.NoError(t, err)
	b, _ := json.Marshal(map[string]string{"challenge": str(c, "challenge"), "solution": sol})
	return string(b)
}

func testPowChallenge(t *testing.T, x, y string) {
	r := putEvent(t, x, "pow", `{"max_active":100,"challenge":{"type":"pow","difficulty":6}}`)
	require.Equal(t, 201, r.code, r.raw)
	require.Equal(t, map[string]any{"type": "pow", "difficulty": 6.0}, r.body["challenge"])
	require.Equal(t, 200, call(t, y, "GET", "/v1/events/pow", "", "").code) // y knows the event

	none := call(t, x, "POST", "/v1/events/pow/tickets", "", "")
	require.Equal(t, 401, none.code, none.raw)
	require.Equal(t, "challenge_required", str(none, "code"))
	require.Equal(t, "/v1/events/pow/challenge", str(none, "challenge_url"))

	c := call(t, y, "GET", "/v1/events/pow/challenge", "", "")
	require.Equal(t, 200, c.code, c.raw)
	require.Equal(t, "pow", str(c, "type"))
	require.Equal(t, "sha256-leading-zero-bits", str(c, "algorithm"))
	require.EqualValues(t, 6, num(c, "difficulty"))
	require.Equal(t, "no-store", c.header.Get("Cache-Control"))
	exp, err := time.Parse(time.RFC3339, str(c, "expires_at"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(challenge.DefaultTTL), exp, 5*time.Second)

	body := solved(t, y, "pow")
	first := call(t, x, "POST", "/v1/events/pow/tickets", "", body)
	require.Equal(t, 201, first.code, first.raw)
	for _, base := range []string{x, y} {
		again := call(t, base, "POST", "/v1/events/pow/tickets", "", body)
		require.Equal(t, 403, again.code, again.raw)
		require.Equal(t, "challenge_failed", str(again, "code"), "a used challenge, on either instance")
	}

	// Wrong work, a tampered challenge, another event's challenge.
	var b map[string]string
	require.NoError(t, json.Unmarshal([]byte(solved(t, x, "pow")), &b))
	wrong := "x" // a fixed string would solve a challenge 2^-difficulty of the time: take one that does not
	for i := 0; challenge.Solves(b["challenge"], wrong, 6); i++ {
		wrong = "x" + strconv.Itoa(i)
	}
	bad := call(t, x, "POST", "/v1/events/pow/tickets", "", `{"challenge":"`+b["challenge"]+`","solution":"`+wrong+`"}`)
	require.Equal(t, 403, bad.code, bad.raw)
	require.Equal(t, "challenge_failed", str(bad, "code"))
	tampered := strings.Replace(b["challenge"], ".6.", ".1.", 1)
	require.Equal(t, 403, call(t, x, "POST", "/v1/events/pow/tickets", "", `{"challenge":"`+tampered+`","solution":"`+b["solution"]+`"}`).code)
	garbled := call(t, x, "POST", "/v1/events/pow/tickets", "", `{"challenge":"nonsense","solution":"x"}`)
	require.Equal(t, 401, garbled.code, "a malformed challenge: fetch a new one")
	require.Equal(t, "challenge_required", str(garbled, "code"))
	require.Equal(t, 201, putEvent(t, x, "pow-other", `{"max_active":1,"challenge":{"type":"pow","difficulty":1}}`).code)
	other := call(t, x, "POST", "/v1/events/pow/tickets", "", solved(t, x, "pow-other"))
	require.Equal(t, 403, other.code, other.raw)
	require.Contains(t, str(other, "detail"), "another event")
	// The unused challenge still works.
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/pow/tickets", "", solved(t, x, "pow")).code)

	// An idempotent retry with the used challenge gets its ticket back, on either instance.
	body = solved(t, x, "pow")
	made := callH(t, x, "POST", "/v1/events/pow/tickets", "", body, "Idempotency-Key", "retry-1")
	require.Equal(t, 201, made.code, made.raw)
	retry := callH(t, y, "POST", "/v1/events/pow/tickets", "", body, "Idempotency-Key", "retry-1")
	require.Equal(t, 200, retry.code, retry.raw)
	require.Equal(t, str(made, "ticket_id"), str(retry, "ticket_id"))
	require.Equal(t, 403, callH(t, y, "POST", "/v1/events/pow/tickets", "", body, "Idempotency-Key", "retry-2").code,
		"another key is another join: the challenge is used")

	// Server-to-server joins with the admin key need no challenge.
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/pow/tickets", adminKey, `{"user_id":"u-1"}`).code)

	// A challenge issued before the operator raised the difficulty is refused (fetch a new
	// one); one issued before the event was deleted and created again too.
	early := solved(t, x, "pow")
	require.Equal(t, 200, call(t, x, "PATCH", "/v1/events/pow", adminKey, `{"challenge":{"difficulty":7}}`).code)
	raised := call(t, x, "POST", "/v1/events/pow/tickets", "", early)
	require.Equal(t, 401, raised.code, raised.raw)
	require.Equal(t, "challenge_required", str(raised, "code"))
	require.Equal(t, "the difficulty was raised: fetch a new one", str(raised, "detail"))
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/pow/tickets", "", solved(t, x, "pow")).code)
	require.Equal(t, 201, putEvent(t, x, "pow-life", `{"max_active":1,"challenge":{"type":"pow","difficulty":2}}`).code)
	used, unused := solved(t, x, "pow-life"), solved(t, x, "pow-life")
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/pow-life/tickets", "", used).code)
	require.Equal(t, 204, call(t, x, "DELETE", "/v1/events/pow-life", adminKey, "").code)
	require.Equal(t, 201, putEvent(t, x, "pow-life", `{"max_active":1,"challenge":{"type":"pow","difficulty":2}}`).code)
	for _, old := range []string{used, unused} {
		r := call(t, x, "POST", "/v1/events/pow-life/tickets", "", old)
		require.Equal(t, 403, r.code, "a challenge of the event's earlier life: %s", r.raw)
	}
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/pow-life/tickets", "", solved(t, x, "pow-life")).code)

	// PATCH changes the difficulty, then removes the challenge.
	p := call(t, x, "PATCH", "/v1/events/pow", adminKey, `{"challenge":{"difficulty":3}}`)
	require.Equal(t, 200, p.code, p.raw)
	require.Equal(t, map[string]any{"type": "pow", "difficulty": 3.0}, p.body["challenge"])
	require.EqualValues(t, 3, num(call(t, x, "GET", "/v1/events/pow/challenge", "", ""), "difficulty"))
	p = call(t, x, "PATCH", "/v1/events/pow", adminKey, `{"challenge":null}`)
	require.Equal(t, 200, p.code, p.raw)
	require.Nil(t, p.body["challenge"])
	require.Equal(t, "none", str(call(t, x, "GET", "/v1/events/pow/challenge", "", ""), "type"))
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/pow/tickets", "", "").code)

	// Invalid configurations are 422.
	for _, bad := range []string{`{"type":"pow","difficulty":41}`, `{"type":"pow","difficulty":0}`, `{"difficulty":3}`,
		`{"type":"captcha"}`, `{"type":"external","siteverify_url":"https://c.example/v"}`,
		`{"type":"pow","secret":"s"}`, `{"type":"external","siteverify_url":"javascript:x","secret":"s"}`} {
		r := putEvent(t, x, "pow", `{"max_active":1,"challenge":`+bad+`}`)
		require.Equal(t, 422, r.code, bad)
		require.Equal(t, "invalid_field", str(r, "code"), bad)
		require.Contains(t, str(r, "detail"), "challenge", bad)
	}
}

// TestExternalChallenge: an event whose joins carry a captcha token checks it at the operator's
// siteverify URL (a local fake service) with the secret, which no response or audit entry
// shows; a token passes once; an idempotent retry of the join that used it gets its ticket
// back; a service that does not answer is 503 challenge_unavailable within the timeout, never
// a hang; on both backends.
func TestExternalChallenge(t *testing.T) {
	const secret = "the-operators-captcha-secret"
	fake := captchatest.New(t, secret)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + ln.Addr().String() + "/siteverify"
	require.NoError(t, ln.Close())
	onBothBackends(t, func(t *testing.T, x, y string) { testExternalChallenge(t, x, y, fake, secret, down) },
		func(c *app.Config) { c.CaptchaSiteverifyURLs = []string{fake.URL, down} })
}

func testExternalChallenge(t *testing.T, x, y string, fake *captchatest.Fake, secret, down string) {
	r := putEvent(t, x, "cap", `{"max_active":100,"challenge":{"type":"external","siteverify_url":"`+fake.URL+`","secret":"`+secret+`"}}`)
	require.Equal(t, 201, r.code, r.raw)
	require.Equal(t, map[string]any{"type": "external", "siteverify_url": fake.URL}, r.body["challenge"])
	g := call(t, y, "GET", "/v1/events/cap", "", "")
	require.Equal(t, 200, g.code)
	require.NotContains(t, g.raw, secret)
	require.Equal(t, "external", str(call(t, y, "GET", "/v1/events/cap/challenge", "", ""), "type"))

	none := call(t, x, "POST", "/v1/events/cap/tickets", "", "")
	require.Equal(t, 401, none.code, none.raw)
	require.Equal(t, "challenge_required", str(none, "code"))
	require.Equal(t, "/v1/events/cap/challenge", str(none, "challenge_url"))

	tok := fake.Token()
	first := call(t, x, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+tok+`"}`)
	require.Equal(t, 201, first.code, first.raw)
	reqs := fake.Requests()
	require.Equal(t, secret, reqs[len(reqs)-1].Secret)
	require.Equal(t, tok, reqs[len(reqs)-1].Response)
	require.Equal(t, "127.0.0.1", reqs[len(reqs)-1].RemoteIP)
	again := call(t, y, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+tok+`"}`)
	require.Equal(t, 403, again.code, again.raw)
	require.Equal(t, "challenge_failed", str(again, "code"))
	require.Contains(t, str(again, "detail"), "timeout-or-duplicate")
	require.Equal(t, 403, call(t, x, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"forged"}`).code)

	// The retry of a join that used its token gets the ticket back; a retry whose first try
	// made nothing does not pass with a spent token.
	tok = fake.Token()
	made := callH(t, x, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+tok+`"}`, "Idempotency-Key", "k-1")
	require.Equal(t, 201, made.code, made.raw)
	retry := callH(t, y, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+tok+`"}`, "Idempotency-Key", "k-1")
	require.Equal(t, 200, retry.code, retry.raw)
	require.Equal(t, str(made, "ticket_id"), str(retry, "ticket_id"))
	stranger := callH(t, y, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+tok+`"}`, "Idempotency-Key", "k-2")
	require.Equal(t, 403, stranger.code, stranger.raw)
	require.Equal(t, "challenge_failed", str(stranger, "code"))

	// The secret stays out of the audit trail.
	audit := call(t, x, "GET", "/v1/audit?event_id=cap", adminKey, "")
	require.Equal(t, 200, audit.code)
	require.Contains(t, audit.raw, fake.URL)
	require.NotContains(t, audit.raw, secret)

	// A PATCH keeps the secret it does not name; a service that does not answer is a 503.
	p := call(t, x, "PATCH", "/v1/events/cap", adminKey, `{"max_active":90}`)
	require.Equal(t, 200, p.code, p.raw)
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+fake.Token()+`"}`).code,
		"the secret survived the PATCH")
	p = call(t, x, "PATCH", "/v1/events/cap", adminKey, `{"challenge":{"siteverify_url":"`+down+`","secret":"s"}}`)
	require.Equal(t, 200, p.code, p.raw)
	start := time.Now()
	u := call(t, x, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+fake.Token()+`"}`)
	require.Equal(t, 503, u.code, u.raw)
	require.Equal(t, "challenge_unavailable", str(u, "code"))
	require.Less(t, time.Since(start), 10*time.Second)
	p = call(t, x, "PATCH", "/v1/events/cap", adminKey, `{"challenge":{"siteverify_url":"`+fake.URL+`","secret":"`+secret+`"}}`)
	require.Equal(t, 200, p.code, p.raw)
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+fake.Token()+`"}`).code)
}

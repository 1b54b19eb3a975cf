package apidoc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/captcha/captchatest"
	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

const (
	adminKey    = "apidoc-test-admin-key-0123456789abcdef"
	tokenKey    = "apidoc-test-token-key-0123456789abcdef"
	identityKey = "apidoc-test-identity-key-0123456789abcdef"
)

// untriggerable are the problem codes a client cannot make a healthy service answer, with why.
var untriggerable = map[string]string{
	"store_unavailable":    "needs Redis or the database to fail",
	"internal_error":       "needs a bug",
	"sale_restoring":       "needs Redis to lose an event's inventory",
	"too_many_connections": "needs 50,000 push connections",
	"shutting_down":        "needs the instance to be stopping while the request arrives",
	"body_timeout":         "needs a body cut short for the 10 s body deadline (TestSlowBodyIsCutOff in internal/app answers it end to end)",
	// A request that does not parse, which no HTTP client sends (TestFramingErrorsAreProblems
	// in internal/app sends each on every listener of a running instance).
	"malformed_request":             "needs a request whose HTTP framing does not parse",
	"header_too_large":              "needs a header block over 32 KiB",
	"unsupported_transfer_encoding": "needs a Transfer-Encoding other than chunked",
	"unsupported_http_version":      "needs a request line of another protocol than HTTP/1.x",
	"expectation_failed":            "needs an Expect other than 100-continue",
}

// TestAPIAgainstDocument runs a realistic session against both deployments of `waitroom
// serve`, as real processes, through a client that validates every request and response
// against openapi.json; then it checks that every operation of the document answered a
// validated response and that every problem code a client can trigger was seen.
func TestAPIAgainstDocument(t *testing.T) {
	var mu sync.Mutex
	codes := map[string]bool{}
	run := func(t *testing.T, base string, identity bool, fake *captchatest.Fake, down string) {
		c := newChecker(t, http.DefaultTransport.(*http.Transport).Clone())
		s := &session{t: t, base: base, c: c, client: &http.Client{Transport: c, Timeout: 30 * time.Second}, identity: identity,
			captcha: fake, captchaDown: down}
		defer s.client.CloseIdleConnections()
		s.run()
		for _, op := range docRoutes(t) {
			if !c.ops[op] {
				t.Errorf("operation %s of openapi.json was not exercised with a validated response", op)
			}
		}
		for _, comp := range []string{"NotFound", "MethodNotAllowed"} {
			if !c.ops[comp] {
				t.Errorf("the %s response was not exercised", comp)
			}
		}
		mu.Lock()
		for code := range c.codes {
			codes[code] = true
		}
		mu.Unlock()
	}
	t.Run("embedded", func(t *testing.T) {
		fake, down, allowed := captchaServices(t)
		base := serve(t, []string{"WAITROOM_ADMIN_KEY=" + adminKey, "WAITROOM_TOKEN_KEY=" + tokenKey,
			"WAITROOM_IDENTITY_KEY=", "WAITROOM_IDENTITY_PUBLIC_KEY="}, "--data", t.TempDir()+"/waitroom.db", "--gate", gateFile(t), "--history-interval", "200ms",
			"--captcha-siteverify-urls", allowed, "--health-urls", "http://127.0.0.1:9/health")
		run(t, base, false, fake, down)
	})
	t.Run("scale-out", func(t *testing.T) {
		rc := redistest.Client(t)
		prefix := redistest.Prefix(t, rc)
		db := sqltest.Postgres(t)
		fake, down, allowed := captchaServices(t)
		base := serve(t, []string{"WAITROOM_ADMIN_KEY=" + adminKey, "WAITROOM_TOKEN_KEY=" + tokenKey,
			"WAITROOM_IDENTITY_KEY=" + identityKey, "WAITROOM_IDENTITY_PUBLIC_KEY="},
			"--redis", redisURL(), "--database", db, "--redis-prefix", prefix, "--gate", gateFile(t), "--history-interval", "200ms",
			"--captcha-siteverify-urls", allowed, "--health-urls", "http://127.0.0.1:9/health")
		run(t, base, true, fake, down)
	})
	if t.Failed() {
		return
	}
	_, enum := problemCodes(t)
	var missed []string
	for _, code := range enum {
		if !codes[code] && untriggerable[code] == "" {
			missed = append(missed, code)
		}
	}
	sort.Strings(missed)
	require.Empty(t, missed, "problem codes of openapi.json that no request triggered")
}

// captchaServices starts a fake captcha service and finds a closed port (a service that is
// down), and returns them with the allow-list of serve that names both
// (--captcha-siteverify-urls: the only URLs events may verify at).
func captchaServices(t *testing.T) (fake *captchatest.Fake, down, allowed string) {
	fake = captchatest.New(t, "captcha-secret-0123")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down = "http://" + ln.Addr().String() + "/siteverify"
	require.NoError(t, ln.Close())
	return fake, down, fake.URL + "," + down
}

// gateFile writes a gate file without a listener (forward auth only) whose one site, host
// 127.0.0.1, protects /protected/ with the event "gated", and returns its name.
func gateFile(t *testing.T) string {
	name := t.TempDir() + "/gate.yaml"
	require.NoError(t, os.WriteFile(name, []byte("sites:\n  - host: 127.0.0.1\n    protect:\n      - event: gated\n        paths: [/protected/]\n      - event: ghost\n        paths: [/unset/]\n"), 0o600))
	return name
}

// session is one client's walk through the API.
type session struct {
	t        *testing.T
	base     string
	c        *checker
	client   *http.Client
	identity bool // the instance has an identity key (WAITROOM_IDENTITY_KEY)
	// captcha is a fake captcha service and captchaDown a URL where none answers, both on the
	// instance's --captcha-siteverify-urls.
	captcha     *captchatest.Fake
	captchaDown string
}

// req describes one request.
type req struct {
	method, path string
	body         any // nil, a string (sent as is) or a value (sent as JSON)
	auth         string
	header       map[string]string
	outside      bool // deliberately outside the document's rules
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

func (r reply) str(t testing.TB, field string) string {
	t.Helper()
	v, _ := r.json(t)[field].(string)
	require.NotEmpty(t, v, "field %s of %s", field, r.body)
	return v
}

func (s *session) send(q req) *http.Response {
	s.t.Helper()
	var body io.Reader
	switch b := q.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(s.t, err)
		body = bytes.NewReader(raw)
	}
	ctx := context.Background()
	if q.outside {
		ctx = outside(ctx)
	}
	r, err := http.NewRequestWithContext(ctx, q.method, s.base+q.path, body)
	require.NoError(s.t, err)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if q.auth != "" {
		r.Header.Set("Authorization", "Bearer "+q.auth)
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	resp, err := s.client.Do(r)
	require.NoError(s.t, err, "%s %s", q.method, q.path)
	return resp
}

// want sends q and requires the status and, for a problem, the code ("" for none).
func (s *session) want(q req, status int, code string) reply {
	s.t.Helper()
	resp := s.send(q)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	rep := reply{status: resp.StatusCode, header: resp.Header, body: b}
	require.Equal(s.t, status, resp.StatusCode, "%s %s: %s", q.method, q.path, b)
	if code != "" {
		require.Equal(s.t, code, rep.json(s.t)["code"], "%s %s", q.method, q.path)
	}
	return rep
}

func (s *session) identityToken(sub string, key string) string {
	s.t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
	}).SignedString([]byte(key))
	require.NoError(s.t, err)
	return tok
}

// challenges walks the events with a challenge: a proof of work, a captcha token checked at a
// local fake service, and a service that is down.
func (s *session) challenges() {
	t := s.t
	A := adminKey
	require.Equal(t, "none", s.want(req{method: "GET", path: "/v1/events/free/challenge"}, 200, "").json(t)["type"])
	s.want(req{method: "GET", path: "/v1/events/nope/challenge"}, 404, "event_not_found")
	s.want(req{method: "GET", path: "/v1/events/BAD/challenge", outside: true}, 400, "invalid_event_id")
	s.want(req{method: "PUT", path: "/v1/events/pow", auth: A, body: map[string]any{"max_active": 5, "challenge": map[string]any{"type": "pow", "difficulty": 41}}, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/pow", auth: A, body: map[string]any{"max_active": 5, "challenge": map[string]any{"type": "pow", "difficulty": 4}}}, 201, "")
	r := s.want(req{method: "POST", path: "/v1/events/pow/tickets"}, 401, "challenge_required")
	require.Equal(t, "/v1/events/pow/challenge", r.json(t)["challenge_url"])
	ch := s.want(req{method: "GET", path: "/v1/events/pow/challenge"}, 200, "").str(t, "challenge")
	sol, err := challenge.Solve(context.Background(), ch)
	require.NoError(t, err)
	wrong := "nope" // a fixed string would solve a challenge 2^-difficulty of the time: take one that does not
	for i := 0; challenge.Solves(ch, wrong, 4); i++ {
		wrong = "nope" + strconv.Itoa(i)
	}
	s.want(req{method: "POST", path: "/v1/events/pow/tickets", body: map[string]any{"challenge": ch, "solution": wrong}}, 403, "challenge_failed")
	s.want(req{method: "POST", path: "/v1/events/pow/tickets", body: map[string]any{"challenge": ch, "solution": sol}}, 201, "")
	s.want(req{method: "POST", path: "/v1/events/pow/tickets", body: map[string]any{"challenge": ch, "solution": sol}}, 403, "challenge_failed")

	fake, down := s.captcha, s.captchaDown
	refused := s.want(req{method: "PUT", path: "/v1/events/captcha", auth: A, body: map[string]any{"max_active": 5,
		"challenge": map[string]any{"type": "external", "siteverify_url": "https://captcha.example/siteverify", "secret": "s"}}}, 422, "invalid_field")
	require.Equal(t, "challenge.siteverify_url must be one of the verification URLs the operator allows (serve --captcha-siteverify-urls); this instance allows "+
		fake.URL+", "+down, refused.json(t)["detail"], "said once, with the list")
	s.want(req{method: "PUT", path: "/v1/events/captcha", auth: A, body: map[string]any{"max_active": 5,
		"challenge": map[string]any{"type": "external", "siteverify_url": fake.URL, "secret": "captcha-secret-0123"}}}, 201, "")
	s.want(req{method: "PATCH", path: "/v1/events/captcha", auth: A, body: map[string]any{"challenge": map[string]any{"siteverify_url": down}}}, 422, "invalid_field")
	require.Equal(t, "external", s.want(req{method: "GET", path: "/v1/events/captcha/challenge"}, 200, "").json(t)["type"])
	s.want(req{method: "POST", path: "/v1/events/captcha/tickets", body: map[string]any{"captcha_token": fake.Token()}}, 201, "")
	s.want(req{method: "PUT", path: "/v1/events/captcha-down", auth: A, body: map[string]any{"max_active": 5,
		"challenge": map[string]any{"type": "external", "siteverify_url": down, "secret": "s"}}}, 201, "")
	s.want(req{method: "POST", path: "/v1/events/captcha-down/tickets", body: map[string]any{"captcha_token": "t"}}, 503, "challenge_unavailable")
}

func (s *session) run() {
	t := s.t
	A := adminKey
	ts := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }

	// Operations, the document itself, the key set.
	s.want(req{method: "GET", path: "/healthz"}, 200, "")
	s.want(req{method: "GET", path: "/readyz"}, 200, "")
	s.want(req{method: "GET", path: "/readyz?exclude=database&exclude=redis"}, 200, "")
	s.want(req{method: "GET", path: "/readyz?exclude=postgres", outside: true}, 400, "invalid_query")
	s.want(req{method: "GET", path: "/metrics", outside: true}, 401, "unauthorized")
	m := s.want(req{method: "GET", path: "/metrics", auth: A}, 200, "")
	require.Contains(t, m.header.Get("Content-Type"), "text/plain")
	d := s.want(req{method: "GET", path: "/openapi.json"}, 200, "")
	etag := d.header.Get("ETag")
	require.NotEmpty(t, etag)
	s.want(req{method: "GET", path: "/openapi.json", header: map[string]string{"If-None-Match": etag}}, 304, "")
	s.want(req{method: "GET", path: "/.well-known/jwks.json"}, 200, "")

	// Routing: an unknown path, a known path with another method.
	s.want(req{method: "GET", path: "/v1/nothing-here", outside: true}, 404, "not_found")
	// A path not in its clean form is not redirected (net/http's mux would: an HTML 307).
	s.want(req{method: "GET", path: "//v1/events", outside: true}, 404, "not_found")
	s.want(req{method: "POST", path: "/v1/events/x/../ga/tickets", outside: true}, 404, "not_found")
	s.want(req{method: "GET", path: "/v1/./events", outside: true}, 404, "not_found")
	// An encoded / is not a separator: no route, and the detail names the path as sent.
	enc := s.want(req{method: "GET", path: "/v1/events/x/tickets%2Fabc", outside: true}, 404, "not_found")
	require.Contains(t, enc.str(t, "detail"), "/v1/events/x/tickets%2Fabc")
	r := s.want(req{method: "DELETE", path: "/healthz", outside: true}, 405, "method_not_allowed")
	require.NotEmpty(t, r.header.Get("Allow"))

	// Events: admin key, validation, create, replace.
	s.want(req{method: "GET", path: "/v1/events", outside: true}, 401, "unauthorized")
	r = s.want(req{method: "GET", path: "/v1/events", auth: "not-the-key"}, 401, "unauthorized")
	require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
	s.want(req{method: "PUT", path: "/v1/events/ga", body: map[string]any{"max_active": 2}, outside: true}, 401, "unauthorized")
	s.want(req{method: "PUT", path: "/v1/events/BAD", auth: A, body: map[string]any{"max_active": 2}, outside: true}, 400, "invalid_event_id")
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"max_active": 2`, outside: true}, 400, "malformed_json")
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"max_active": 2, "nmae": "typo"}`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"max_active": "two"}`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"max_active": 2, "claim_ttl_s": 2}`, outside: true}, 422, "invalid_field")
	// Go's zero time is a date like any other given before 1970: refused, not taken for none.
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"max_active": 2, "closes_at": "0001-01-01T00:00:00Z"}`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"max_active": 2, "opens_at": "0001-01-01T00:00:00Z"}`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: `{"name": "` + strings.Repeat("x", 1100<<10) + `", "max_active": 2}`, outside: true}, 413, "body_too_large")
	r = s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: map[string]any{"name": "GA", "max_active": 2, "capacity": 4, "max_per_booking": 2}}, 201, "")
	require.Equal(t, "/v1/events/ga", r.header.Get("Location"))
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: map[string]any{"name": "General admission", "max_active": 3, "capacity": 3, "max_per_booking": 2, "redirect_url": "https://example.com/shop"}}, 200, "")
	s.want(req{method: "PUT", path: "/v1/events/seated", auth: A, body: map[string]any{"max_active": 5, "seat_map": map[string]any{"rows": []string{"A", "B"}, "per_row": 2}}}, 201, "")
	s.want(req{method: "PUT", path: "/v1/events/named", auth: A, body: map[string]any{"max_active": 5, "seats": []string{"S1", "S2"}, "hold_ttl_s": 1}}, 201, "")
	s.want(req{method: "PUT", path: "/v1/events/later", auth: A, body: map[string]any{"max_active": 1, "opens_at": ts(time.Hour)}}, 201, "")
	s.want(req{method: "PUT", path: "/v1/events/over", auth: A, body: map[string]any{"max_active": 1, "opens_at": ts(-2 * time.Hour), "closes_at": ts(-time.Hour)}}, 201, "")
	s.want(req{method: "PUT", path: "/v1/events/free", auth: A, body: map[string]any{"max_active": 1}}, 201, "")
	s.want(req{method: "GET", path: "/v1/events", auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga"}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/seated"}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/nope"}, 404, "event_not_found")
	s.want(req{method: "GET", path: "/v1/events/BAD", outside: true}, 400, "invalid_event_id")

	// Joins.
	t1 := s.want(req{method: "POST", path: "/v1/events/ga/tickets"}, 201, "")
	require.Equal(t, "ADMITTED", t1.json(t)["status"])
	t2 := s.want(req{method: "POST", path: "/v1/events/ga/tickets", auth: A, body: map[string]any{"user_id": "u1"}}, 201, "")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", auth: A, body: map[string]any{"user_id": "u1"}}, 200, "")
	t3 := s.want(req{method: "POST", path: "/v1/events/ga/tickets", body: map[string]any{}}, 201, "")
	require.Equal(t, "ADMITTED", t3.json(t)["status"])
	t4 := s.want(req{method: "POST", path: "/v1/events/ga/tickets"}, 201, "")
	require.Equal(t, "QUEUED", t4.json(t)["status"])
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", body: map[string]any{"user_id": "u9"}}, 401, "admin_key_required")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", body: map[string]any{"user_id": ""}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", body: map[string]any{"identity": ""}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", auth: A, body: map[string]any{"user_id": "u1", "identity": ""}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", auth: "not-the-key"}, 401, "unauthorized")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", auth: A, body: map[string]any{"user_id": strings.Repeat("u", 129)}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", auth: A, body: map[string]any{"user_id": "u1", "identity": "x"}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", body: `[`, outside: true}, 400, "malformed_json")
	s.want(req{method: "POST", path: "/v1/events/ga/tickets", body: `{"identity": "` + strings.Repeat("x", 21<<10) + `"}`}, 413, "body_too_large")
	s.want(req{method: "POST", path: "/v1/events/nope/tickets"}, 404, "event_not_found")
	s.want(req{method: "POST", path: "/v1/events/over/tickets"}, 410, "event_closed")
	pre := s.want(req{method: "POST", path: "/v1/events/later/tickets"}, 201, "")
	require.Equal(t, "QUEUED", pre.json(t)["status"])
	if s.identity {
		id := s.identityToken("u2", identityKey)
		s.want(req{method: "POST", path: "/v1/events/free/tickets", body: map[string]any{"identity": id}}, 201, "")
		s.want(req{method: "POST", path: "/v1/events/free/tickets", body: map[string]any{"identity": id}}, 200, "")
		s.want(req{method: "POST", path: "/v1/events/free/tickets", body: map[string]any{"identity": s.identityToken("u2", "another-key-0123456789abcdef0123")}}, 401, "invalid_identity")
	} else {
		s.want(req{method: "POST", path: "/v1/events/free/tickets", body: map[string]any{"identity": s.identityToken("u2", identityKey)}}, 422, "identity_not_supported")
	}
	s.challenges()

	// Tickets and admission checks.
	id1, tok1 := t1.str(t, "ticket_id"), t1.str(t, "admission_token")
	tok2 := t2.str(t, "admission_token")
	id3, tok3 := t3.str(t, "ticket_id"), t3.str(t, "admission_token")
	s.want(req{method: "GET", path: "/v1/events/ga/tickets/" + id1}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/tickets/not-a-ticket"}, 404, "ticket_not_found")
	s.want(req{method: "GET", path: "/v1/events/seated/tickets/" + id1}, 404, "ticket_not_found")
	s.want(req{method: "GET", path: "/v1/events/ga/admission", auth: tok1}, 200, "")
	// The visitor's address counts among those using the admission: the default 3, then 403.
	for _, c := range []string{"198.51.100.1", "198.51.100.2", "2001:db8:1:2::7"} {
		s.want(req{method: "GET", path: "/v1/events/ga/admission?client=" + c, auth: tok1}, 200, "")
	}
	s.want(req{method: "GET", path: "/v1/events/ga/admission?client=198.51.100.9", auth: tok1}, 403, "admission_shared")
	s.want(req{method: "GET", path: "/v1/events/ga/admission?client=nonsense", auth: tok1}, 400, "invalid_query")
	s.want(req{method: "GET", path: "/v1/events/ga/admission?client=", auth: tok1}, 400, "invalid_query") // not "no client"
	s.want(req{method: "GET", path: "/v1/events/ga/admission", outside: true}, 401, "invalid_token")
	r = s.want(req{method: "GET", path: "/v1/events/seated/admission", auth: tok1}, 401, "invalid_token")
	require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
	s.want(req{method: "GET", path: "/v1/events/ga/admission", auth: "garbage"}, 401, "invalid_token")

	// Holds on a general-admission event (capacity 3, at most 2 per booking).
	s.want(req{method: "POST", path: "/v1/events/ga/holds", body: map[string]any{"quantity": 1}, outside: true}, 401, "invalid_token")
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: `{"quantity":`, outside: true}, 400, "malformed_json")
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: map[string]any{"quantity": 3}}, 422, "invalid_hold")
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: map[string]any{"seats": []string{"A-01"}}}, 422, "invalid_hold")
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: map[string]any{"quantity": 1, "seats": nil}, outside: true}, 422, "invalid_hold")
	// A member of the wrong type is named with the type it must have.
	for body, want := range map[string]string{`{"quantity":"1"}`: "field quantity must be an integer",
		`{"quantity":1.5}`: "field quantity must be an integer", `{"seats":"A-01"}`: "field seats must be an array",
		`{"seats":[null]}`: "field seats.0 must be a string", `{"seats":["A-01",null]}`: "field seats.1 must be a string"} {
		detail := s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: body, outside: true}, 422, "invalid_field").json(t)["detail"]
		require.Equal(t, want, detail, body)
	}
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: map[string]any{"qty": 1}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: `{"seats":["` + strings.Repeat("x", 5<<10) + `"]}`}, 413, "body_too_large")
	h1 := s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: map[string]any{"quantity": 2}}, 201, "")
	hold1 := h1.str(t, "hold_id")
	require.Equal(t, "/v1/events/ga/holds/"+hold1, h1.header.Get("Location"))
	r = s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok2, body: map[string]any{"quantity": 2}}, 409, "hold_conflict")
	require.EqualValues(t, 1, r.json(t)["available"])
	hold2 := s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok2, body: map[string]any{"quantity": 1}}, 201, "").str(t, "hold_id")
	s.want(req{method: "DELETE", path: "/v1/events/ga/holds/" + hold1, auth: tok2}, 403, "hold_not_yours")
	s.want(req{method: "DELETE", path: "/v1/events/ga/holds/no-such-hold", auth: tok2}, 404, "hold_not_found")
	s.want(req{method: "GET", path: "/v1/events/ga/seats"}, 200, "")

	// Bookings.
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold1}, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, outside: true}, 400, "invalid_idempotency_key")
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold1}, header: map[string]string{"Idempotency-Key": "café"}, outside: true}, 400, "invalid_idempotency_key")
	// An empty key is refused, not taken for none (the client's retry would send the key it
	// meant). The document says minLength 1; its validator takes an empty header for none.
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold1}, header: map[string]string{"Idempotency-Key": ""}}, 400, "invalid_idempotency_key")
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: `{"hold_id":"` + strings.Repeat("h", 2<<10) + `"}`, outside: true}, 413, "body_too_large")
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold2}}, 403, "hold_not_yours")
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": "no-such-hold"}}, 404, "hold_not_found")
	key := map[string]string{"Idempotency-Key": "order-1"}
	b1 := s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold1}, header: key}, 201, "")
	booking1 := b1.str(t, "booking_id")
	require.Equal(t, "/v1/events/ga/bookings/"+booking1, b1.header.Get("Location"))
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold1}, header: key}, 200, "")
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold2}, header: key}, 422, "idempotency_key_reused")
	r = s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok1, body: map[string]any{"hold_id": hold1}, header: map[string]string{"Idempotency-Key": "order-2"}}, 409, "already_booked")
	require.Equal(t, booking1, r.json(t)["booking_id"])
	c1 := s.want(req{method: "GET", path: "/v1/events/ga/tickets/" + id1}, 200, "")
	require.Equal(t, "COMPLETED", c1.json(t)["status"])
	require.Equal(t, booking1, c1.json(t)["booking_id"])
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok1, body: map[string]any{"quantity": 1}}, 401, "admission_not_live")
	r = s.want(req{method: "GET", path: "/v1/events/ga/admission", auth: tok1}, 401, "admission_not_live")
	require.Equal(t, "COMPLETED", r.json(t)["ticket_status"])
	s.want(req{method: "POST", path: "/v1/events/ga/bookings", auth: tok2, body: map[string]any{"hold_id": hold2}}, 201, "")
	soldOut := s.want(req{method: "GET", path: "/v1/events/ga/seats"}, 200, "").json(t)
	require.Equal(t, true, soldOut["sold_out"])
	s.want(req{method: "POST", path: "/v1/events/ga/tickets"}, 410, "sold_out")
	// The ticket that waited was admitted when the first booking ended a session, or reads
	// SOLD_OUT if the sale ended first; the one admitted without buying is refused a hold.
	st4 := s.want(req{method: "GET", path: "/v1/events/ga/tickets/" + t4.str(t, "ticket_id")}, 200, "").json(t)["status"]
	require.Contains(t, []any{"ADMITTED", "SOLD_OUT"}, st4)
	s.want(req{method: "POST", path: "/v1/events/ga/holds", auth: tok3, body: map[string]any{"quantity": 1}}, 410, "sold_out")
	s.want(req{method: "GET", path: "/v1/events/ga/bookings/" + booking1, auth: tok1}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/bookings/" + booking1, auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/bookings/" + booking1, outside: true}, 401, "unauthorized")
	s.want(req{method: "GET", path: "/v1/events/ga/bookings/" + booking1, auth: tok3}, 401, "unauthorized")
	s.want(req{method: "GET", path: "/v1/events/ga/bookings/bk_nothing", auth: A}, 404, "booking_not_found")
	s.want(req{method: "DELETE", path: "/v1/events/ga/bookings/" + booking1, outside: true}, 401, "unauthorized")
	s.want(req{method: "DELETE", path: "/v1/events/ga/bookings/bk_nothing", auth: A}, 404, "booking_not_found")
	cancelled := s.want(req{method: "DELETE", path: "/v1/events/ga/bookings/" + booking1, auth: A}, 200, "")
	require.Equal(t, "CANCELLED", cancelled.json(t)["status"])
	s.want(req{method: "DELETE", path: "/v1/events/ga/bookings/" + booking1, auth: A}, 200, "")

	// A seated event: seats, conflicts, unknown seats, release.
	sa := s.want(req{method: "POST", path: "/v1/events/seated/tickets"}, 201, "").str(t, "admission_token")
	sb := s.want(req{method: "POST", path: "/v1/events/seated/tickets"}, 201, "").str(t, "admission_token")
	hs := s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sa, body: map[string]any{"seats": []string{"A-01", "A-02"}}}, 201, "").str(t, "hold_id")
	r = s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sb, body: map[string]any{"seats": []string{"A-02"}}}, 409, "hold_conflict")
	require.Equal(t, []any{"A-02"}, r.json(t)["conflicts"])
	r = s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sb, body: map[string]any{"seats": []string{"Z-99"}}}, 422, "invalid_hold")
	// Seats and a quantity together are refused, whatever they hold.
	s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sb, body: map[string]any{"seats": []string{"A-03"}, "quantity": 0}, outside: true}, 422, "invalid_hold")
	s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sb, body: map[string]any{"seats": []string{}, "quantity": 1}, outside: true}, 422, "invalid_hold")
	s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sb, body: map[string]any{"seats": []string{"B-01"}, "quantity": nil}, outside: true}, 422, "invalid_hold")
	require.Equal(t, []any{"Z-99"}, r.json(t)["unknown_seats"])
	s.want(req{method: "POST", path: "/v1/events/seated/holds", auth: sb, body: map[string]any{"quantity": 1}}, 422, "invalid_hold")
	sr := s.want(req{method: "GET", path: "/v1/events/seated/seats"}, 200, "")
	seats := sr.json(t)
	s.want(req{method: "GET", path: "/v1/events/seated/seats", header: map[string]string{"If-None-Match": sr.header.Get("ETag")}}, 304, "")
	require.Equal(t, "held", seats["seats"].(map[string]any)["A-01"])
	s.want(req{method: "DELETE", path: "/v1/events/seated/holds/" + hs, auth: sa}, 204, "")
	s.want(req{method: "DELETE", path: "/v1/events/seated/holds/" + hs, outside: true}, 401, "invalid_token")

	// A hold whose time is up (hold_ttl_s 1): nothing sweeps it before the booking sees it.
	na := s.want(req{method: "POST", path: "/v1/events/named/tickets"}, 201, "").str(t, "admission_token")
	nh := s.want(req{method: "POST", path: "/v1/events/named/holds", auth: na, body: map[string]any{"seats": []string{"S1"}}}, 201, "").json(t)
	exp, err := time.Parse(time.RFC3339, nh["expires_at"].(string))
	require.NoError(t, err)
	// Waiting out a TTL the service measures on its own clock: there is no event to wait on.
	<-time.After(time.Until(exp) + 200*time.Millisecond)
	s.want(req{method: "POST", path: "/v1/events/named/bookings", auth: na, body: map[string]any{"hold_id": nh["hold_id"]}}, 410, "hold_expired")

	// An event that sells nothing.
	fa := s.want(req{method: "POST", path: "/v1/events/free/tickets", auth: A, body: map[string]any{"user_id": "free-1"}}, 201, "")
	if fa.json(t)["status"] == "ADMITTED" {
		s.want(req{method: "POST", path: "/v1/events/free/holds", auth: fa.str(t, "admission_token"), body: map[string]any{"quantity": 1}}, 404, "not_for_sale")
	} else {
		// The identity join above took the one slot: use it.
		s.want(req{method: "DELETE", path: "/v1/events/free/tickets/" + fa.str(t, "ticket_id")}, 204, "")
	}
	s.want(req{method: "GET", path: "/v1/events/free/seats"}, 404, "not_for_sale")
	s.want(req{method: "GET", path: "/v1/events/nope/seats"}, 404, "event_not_found")

	// Campaigns and entries.
	s.want(req{method: "PUT", path: "/v1/campaigns/BAD", auth: A, body: map[string]any{"stock": 1}, outside: true}, 400, "invalid_campaign_id")
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", body: map[string]any{"stock": 1}, outside: true}, 401, "unauthorized")
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: map[string]any{"stock": -1}, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: `{"stock": 1, "opens_at": "0001-01-01T00:00:00Z"}`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: `{"stock": 1, "opens_at": "1969-12-31T23:59:59Z"}`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: `{"stock":`, outside: true}, 400, "malformed_json")
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: `{"stock":1,"pad":"` + strings.Repeat("x", 5<<10) + `"}`, outside: true}, 413, "body_too_large")
	r = s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: map[string]any{"stock": 1}}, 201, "")
	require.Equal(t, "/v1/campaigns/cp", r.header.Get("Location"))
	s.want(req{method: "PUT", path: "/v1/campaigns/cp", auth: A, body: map[string]any{"stock": 1, "opens_at": nil}}, 200, "")
	s.want(req{method: "PUT", path: "/v1/campaigns/soon", auth: A, body: map[string]any{"stock": 5, "opens_at": ts(time.Hour)}}, 201, "")
	s.want(req{method: "GET", path: "/v1/campaigns/cp"}, 200, "")
	s.want(req{method: "GET", path: "/v1/campaigns/nope"}, 404, "campaign_not_found")
	s.want(req{method: "GET", path: "/v1/campaigns/BAD", outside: true}, 400, "invalid_campaign_id")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", auth: A, body: map[string]any{"user_id": "u1"}}, 202, "")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", auth: A, body: map[string]any{"user_id": "u1"}}, 200, "")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", auth: A, body: map[string]any{"user_id": "u5"}}, 202, "")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries"}, 401, "user_required")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", body: map[string]any{"user_id": "u1"}}, 401, "admin_key_required")
	// An empty user_id names nobody: refused as on a join, not taken for no user_id.
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", body: map[string]any{"user_id": ""}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", body: map[string]any{"identity": ""}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", auth: A, body: map[string]any{"user_id": ""}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", auth: A, body: map[string]any{"user_id": "u1", "identity": "x"}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", auth: A, body: `{"user_id":"u1","pad":"` + strings.Repeat("x", 13<<10) + `"}`, outside: true}, 413, "body_too_large")
	s.want(req{method: "POST", path: "/v1/campaigns/soon/entries", auth: A, body: map[string]any{"user_id": "u1"}}, 409, "campaign_not_open")
	s.want(req{method: "POST", path: "/v1/campaigns/nope/entries", auth: A, body: map[string]any{"user_id": "u1"}}, 404, "campaign_not_found")
	s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/u1", auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/u1", outside: true}, 401, "unauthorized")
	s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/nobody", auth: A}, 404, "entry_not_found")
	if s.identity {
		u3 := s.identityToken("u3", identityKey)
		s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", body: map[string]any{"identity": u3}}, 202, "")
		// Worded as a join's refusal: the reason, not the JWT library's inner errors.
		r = s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", body: map[string]any{"identity": "not.a.jwt"}}, 401, "invalid_identity")
		require.Equal(t, "the identity token is invalid: malformed", r.str(t, "detail"))
		s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/u3", auth: u3}, 200, "")
		s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/u1", auth: u3}, 403, "forbidden")
		r = s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/u1", auth: "not.a.jwt"}, 401, "invalid_identity")
		require.Equal(t, "the identity token is invalid: malformed", r.str(t, "detail"))
	} else {
		s.want(req{method: "POST", path: "/v1/campaigns/cp/entries", body: map[string]any{"identity": s.identityToken("u3", identityKey)}}, 422, "identity_not_supported")
		s.want(req{method: "GET", path: "/v1/campaigns/cp/entries/u1", auth: "not.a.jwt"}, 401, "unauthorized")
	}

	// Safe live changes: ETag, If-Match, PATCH, what a write may not drop; sale controls.
	g := s.want(req{method: "GET", path: "/v1/events/ga"}, 200, "")
	tag := g.header.Get("ETag")
	require.NotEmpty(t, tag)
	pt := s.want(req{method: "PATCH", path: "/v1/events/ga", auth: A, body: map[string]any{"max_active": 4}, header: map[string]string{"If-Match": tag}}, 200, "")
	require.NotEqual(t, tag, pt.header.Get("ETag"))
	require.EqualValues(t, 2, pt.json(t)["max_per_booking"], "a PATCH keeps what it does not name")
	r = s.want(req{method: "PATCH", path: "/v1/events/ga", auth: A, body: map[string]any{"max_active": 5}, header: map[string]string{"If-Match": tag}}, 412, "precondition_failed")
	require.Equal(t, pt.header.Get("ETag"), r.header.Get("ETag"))
	s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: map[string]any{"max_active": 4}}, 409, "would_drop_sold")
	exists := s.want(req{method: "PUT", path: "/v1/events/ga", auth: A, body: map[string]any{"max_active": 4}, header: map[string]string{"If-None-Match": "*"}}, 412, "precondition_failed")
	require.Equal(t, pt.header.Get("ETag"), exists.header.Get("ETag"), "create only: the event exists, at its version")
	s.want(req{method: "PUT", path: "/v1/events/created-only", auth: A, body: map[string]any{"max_active": 4}, header: map[string]string{"If-None-Match": "*"}}, 201, "")
	s.want(req{method: "DELETE", path: "/v1/events/created-only", auth: A}, 204, "")
	// If-Match: * writes only over an existing event (RFC 9110 13.1.1); an empty If-Match (a
	// script that failed to read the ETag) matches nothing.
	star := map[string]string{"If-Match": "*"}
	s.want(req{method: "PUT", path: "/v1/events/never-made", auth: A, body: map[string]any{"max_active": 4}, header: star}, 412, "precondition_failed")
	s.want(req{method: "PATCH", path: "/v1/events/never-made", auth: A, body: map[string]any{"max_active": 4}, header: star}, 412, "precondition_failed")
	s.want(req{method: "GET", path: "/v1/events/never-made", auth: A}, 404, "event_not_found")
	s.want(req{method: "PATCH", path: "/v1/events/ga", auth: A, body: map[string]any{"max_active": 4}, header: map[string]string{"If-Match": ""}}, 412, "precondition_failed")
	pt = s.want(req{method: "PATCH", path: "/v1/events/ga", auth: A, body: map[string]any{"max_active": 4}, header: star}, 200, "")
	urls := s.want(req{method: "GET", path: "/v1/captcha/siteverify-urls", auth: A}, 200, "")
	require.NotEmpty(t, urls.json(t)["siteverify_urls"])
	s.want(req{method: "GET", path: "/v1/captcha/siteverify-urls", outside: true}, 401, "unauthorized")
	s.want(req{method: "PATCH", path: "/v1/events/nope", auth: A, body: map[string]any{"max_active": 4}}, 404, "event_not_found")
	s.want(req{method: "PATCH", path: "/v1/events/ga", auth: A, body: `[1]`, outside: true}, 422, "invalid_field")
	s.want(req{method: "PATCH", path: "/v1/events/ga", body: map[string]any{"max_active": 4}, outside: true}, 401, "unauthorized")
	s.want(req{method: "PATCH", path: "/v1/events/later", auth: A, body: map[string]any{"paused": true, "pause_message": "Back soon."}}, 200, "")
	pg := map[string]any{"title": "수강 신청", "message": "Enrolment opens at nine.", "logo_url": "https://uni.example/logo.png",
		"colors": map[string]any{"accent": "#7a1f1f", "background": "#fff", "text": "#111"}, "language": "ko", "unit": "places",
		"template": `<header class="uni"><h1>{{title}}</h1></header><div class="wrap">{{room}}</div>`, "css": ".uni { color: #123; }"}
	r = s.want(req{method: "PATCH", path: "/v1/events/later", auth: A, body: map[string]any{"page": pg}}, 200, "")
	require.Equal(t, pg, r.json(t)["page"])
	s.want(req{method: "GET", path: "/v1/events/later"}, 200, "")
	css := s.want(req{method: "GET", path: "/e/later/page.css"}, 200, "")
	require.Equal(t, ".uni { color: #123; }", string(css.body))
	s.want(req{method: "GET", path: "/e/later/page.css", header: map[string]string{"If-None-Match": css.header.Get("ETag")}}, 304, "")
	s.want(req{method: "GET", path: "/e/later/page.css", header: map[string]string{"If-None-Match": "*"}}, 304, "")
	s.want(req{method: "GET", path: "/e/ga/page.css"}, 404, "not_found")
	s.want(req{method: "PATCH", path: "/v1/events/later", auth: A, body: map[string]any{"page": map[string]any{"template": `<script>alert(1)</script>{{room}}`}}}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/later", auth: A, body: map[string]any{"max_active": 1, "page": map[string]any{"logo_url": "javascript:x"}}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/later/extend", auth: A, body: map[string]any{"seconds": 60}}, 200, "")
	s.want(req{method: "POST", path: "/v1/events/later/extend", auth: A, body: map[string]any{"seconds": 0}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/nope/extend", auth: A, body: map[string]any{"seconds": 5}}, 404, "event_not_found")
	// The opening's draw: the commitment before the opening, the seed after it.
	dr := s.want(req{method: "GET", path: "/v1/events/later/draw"}, 200, "").json(t)
	require.Equal(t, "pending", dr["status"])
	require.NotNil(t, dr["commitment"])
	require.Nil(t, dr["seed"], "the seed is secret before the opening")
	// Close with If-Match: only at that version.
	lv := s.want(req{method: "GET", path: "/v1/events/later"}, 200, "").header.Get("ETag")
	r = s.want(req{method: "POST", path: "/v1/events/later/close", auth: A, header: map[string]string{"If-Match": `"999"`}}, 412, "precondition_failed")
	require.Equal(t, lv, r.header.Get("ETag"))
	s.want(req{method: "POST", path: "/v1/events/nope/close", auth: A, header: map[string]string{"If-Match": "*"}}, 412, "precondition_failed")
	// Strong comparison is byte for byte (RFC 9110 8.8.3.2): other spellings of the version
	// match nothing; a version on no event has nothing to match.
	for _, odd := range []string{`"0` + lv[1:], `"+` + lv[1:], `"` + lv + `"`, `W/` + lv} {
		s.want(req{method: "POST", path: "/v1/events/later/close", auth: A, header: map[string]string{"If-Match": odd}}, 412, "precondition_failed")
	}
	s.want(req{method: "POST", path: "/v1/events/nope/close", auth: A, header: map[string]string{"If-Match": `"1"`}}, 412, "precondition_failed")
	s.want(req{method: "PATCH", path: "/v1/events/nope", auth: A, body: map[string]any{"max_active": 2}, header: map[string]string{"If-Match": `"1"`}}, 412, "precondition_failed")
	s.want(req{method: "POST", path: "/v1/events/later/close", auth: A, header: map[string]string{"If-Match": lv}}, 200, "")
	s.want(req{method: "POST", path: "/v1/events/nope/close", auth: A}, 404, "event_not_found")
	drawn := s.want(req{method: "GET", path: "/v1/events/later/draw"}, 200, "").json(t)
	require.Equal(t, "drawn", drawn["status"], "closing clears opens_at: the line opens, and draws")
	require.Equal(t, dr["commitment"], drawn["commitment"])
	require.NotNil(t, drawn["seed"])
	s.want(req{method: "GET", path: "/v1/events/nope/draw"}, 404, "event_not_found")
	s.want(req{method: "GET", path: "/v1/events/BAD/draw", outside: true}, 400, "invalid_event_id")

	// Idempotent joins.
	ik := map[string]string{"Idempotency-Key": "0f8e1a52-retry-me"}
	i1 := s.want(req{method: "POST", path: "/v1/events/seated/tickets", header: ik}, 201, "")
	i2 := s.want(req{method: "POST", path: "/v1/events/seated/tickets", header: ik}, 200, "")
	require.Equal(t, i1.str(t, "ticket_id"), i2.str(t, "ticket_id"))
	s.want(req{method: "POST", path: "/v1/events/seated/tickets", header: map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, outside: true}, 400, "invalid_idempotency_key")
	// Sent empty: refused, not taken for none (the validator reads an empty header as absent,
	// so the request is within the document).
	s.want(req{method: "POST", path: "/v1/events/seated/tickets", header: map[string]string{"Idempotency-Key": ""}}, 400, "invalid_idempotency_key")

	// Limits and protection against bots.
	s.want(req{method: "PUT", path: "/v1/events/guarded", auth: A, body: map[string]any{"max_active": 5, "capacity": 10,
		"max_per_booking": 2, "max_per_user": 1, "identity_required": true, "session_max_s": 600,
		"limits": map[string]any{"joins_per_client": 1, "join_window_s": 60}}}, 201, "")
	s.want(req{method: "POST", path: "/v1/events/guarded/tickets"}, 401, "identity_required")
	s.want(req{method: "POST", path: "/v1/events/guarded/tickets", header: map[string]string{"Origin": "https://elsewhere.example"}}, 403, "origin_not_allowed")
	buyer := s.want(req{method: "POST", path: "/v1/events/guarded/tickets", auth: A, body: map[string]any{"user_id": "buyer"}}, 201, "")
	require.Equal(t, "ADMITTED", buyer.str(t, "status"))
	btok := buyer.str(t, "admission_token")
	bh := s.want(req{method: "POST", path: "/v1/events/guarded/holds", auth: btok, body: map[string]any{"quantity": 2}}, 201, "")
	r = s.want(req{method: "POST", path: "/v1/events/guarded/bookings", auth: btok, body: map[string]any{"hold_id": bh.str(t, "hold_id")}}, 409, "purchase_limit")
	require.Contains(t, string(r.body), `"remaining":1`)
	s.want(req{method: "PUT", path: "/v1/events/throttled", auth: A, body: map[string]any{"max_active": 1,
		"limits": map[string]any{"joins_per_client": 1}}}, 201, "")
	s.want(req{method: "POST", path: "/v1/events/throttled/tickets"}, 201, "")
	r = s.want(req{method: "POST", path: "/v1/events/throttled/tickets"}, 429, "rate_limited")
	require.NotEmpty(t, r.header.Get("Retry-After"))
	// Joins with the admin key are not counted, with or without user_id.
	s.want(req{method: "POST", path: "/v1/events/throttled/tickets", auth: A}, 201, "")
	s.want(req{method: "POST", path: "/v1/events/throttled/tickets", auth: A}, 201, "")
	s.want(req{method: "GET", path: "/v1/events/ga/bookings/" + strings.Repeat("b", 65), auth: A}, 400, "invalid_id")

	// The gate's forward-auth check (serve --gate).
	s.want(req{method: "PUT", path: "/v1/events/gated", auth: A, body: map[string]any{"max_active": 1}}, 201, "")
	chk := func(uri string, cookie *http.Cookie) map[string]string {
		h := map[string]string{"X-Original-URI": uri}
		if cookie != nil {
			h["Cookie"] = cookie.String()
		}
		return h
	}
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/public", nil)}, 200, "")
	require.Contains(t, string(r.body), `"pass"`)
	// The file's one site names its host: another host is refused, protected path or not.
	otherHost := chk("/public", nil)
	otherHost["X-Forwarded-Host"] = "other.example"
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: otherHost}, 404, "not_found")
	require.Equal(t, "not_found", r.header.Get("X-Waitroom-Problem"))
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/protected/cart?x=1", nil)}, 200, "")
	require.Contains(t, string(r.body), `"admitted"`)
	require.NotEmpty(t, r.header.Get("X-Waitroom-Ticket"))
	admittedCookie := (&http.Response{Header: r.header}).Cookies()
	require.Len(t, admittedCookie, 1)
	s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/protected/cart", admittedCookie[0])}, 200, "")
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/protected/cart", nil)}, 401, "waiting_room")
	loc, err := url.Parse(r.header.Get("X-Waitroom-Location"))
	require.NoError(t, err)
	require.Equal(t, "/e/gated", loc.Path)
	require.NotEmpty(t, loc.Query().Get("ticket"))
	require.Equal(t, "/protected/cart", loc.Query().Get("return"))
	// Envoy's ext_authz asks with the original request's method: a POST to a protected path,
	// or a preflight, is checked as a GET is.
	s.want(req{method: "POST", path: "/v1/gate/check", header: chk("/protected/cart", admittedCookie[0])}, 200, "")
	s.want(req{method: "DELETE", path: "/v1/gate/check", header: chk("/protected/cart", admittedCookie[0])}, 200, "")
	s.want(req{method: "POST", path: "/v1/gate/check", header: chk("/protected/cart", nil)}, 401, "waiting_room")
	// … and so is any other method (WebDAV's PROPFIND, TRACE), which OpenAPI cannot list.
	s.want(req{method: "PROPFIND", path: "/v1/gate/check", header: chk("/public", nil), outside: true}, 200, "")
	s.want(req{method: "REPORT", path: "/v1/gate/check", header: chk("/protected/cart", nil), outside: true}, 401, "waiting_room")
	s.want(req{method: "OPTIONS", path: "/v1/gate/check", header: chk("/protected/cart", nil)}, 401, "waiting_room")
	s.want(req{method: "PUT", path: "/v1/gate/check", header: chk("/public", nil)}, 200, "")
	s.want(req{method: "PATCH", path: "/v1/gate/check", header: chk("/protected", nil)}, 401, "waiting_room")
	s.want(req{method: "GET", path: "/v1/gate/check", header: chk("not a uri", nil)}, 400, "invalid_original_uri")
	s.want(req{method: "GET", path: "/v1/gate/check", header: chk("http://elsewhere/protected", nil)}, 400, "invalid_original_uri")
	s.want(req{method: "GET", path: "/v1/gate/check", header: chk("*", nil)}, 400, "invalid_original_uri")
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/static/..%5cprotected", nil)}, 400, "invalid_path")
	require.Equal(t, "invalid_path", r.header.Get("X-Waitroom-Problem"))
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/protected.json", nil)}, 401, "waiting_room")
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: chk("//elsewhere/protected", nil)}, 401, "waiting_room")
	odd := chk("/public", nil)
	odd["X-Forwarded-Host"] = "shop.example:1:2"
	r = s.want(req{method: "GET", path: "/v1/gate/check", header: odd}, 400, "invalid_host")
	require.Equal(t, "invalid_host", r.header.Get("X-Waitroom-Problem"))
	forged := chk("/public", nil)
	forged["X-Waitroom-Whatever"] = "x"
	s.want(req{method: "GET", path: "/v1/gate/check", header: forged}, 400, "invalid_header")
	// A path the gate file protects with an event that does not exist (ghost).
	s.want(req{method: "GET", path: "/v1/gate/check", header: chk("/unset/x", nil)}, 503, "waiting_room_not_set_up")

	// Named admin keys, their roles, and the audit trail.
	nk := s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "ops", "role": "key_admin"}}, 201, "")
	opsKey := nk.str(t, "key")
	s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "ops"}}, 409, "admin_key_exists")
	s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "root"}}, 422, "invalid_key_name")
	s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "boss", "role": "superuser"}, outside: true}, 422, "invalid_role")
	viewer := s.want(req{method: "POST", path: "/v1/admin/keys", auth: opsKey, body: map[string]any{"name": "viewer", "role": "read_only"}}, 201, "").str(t, "key")
	s.want(req{method: "GET", path: "/v1/admin/keys", auth: opsKey}, 200, "")
	// A key of some events: those events, nothing else.
	gaOps := s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "ga-ops", "role": "operator", "events": []string{"ga"}}}, 201, "").str(t, "key")
	s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "no-events", "events": []string{}}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/admin/keys", auth: A, body: map[string]any{"name": "all-events", "role": "read_only", "events": nil}}, 201, "")
	s.want(req{method: "GET", path: "/v1/events/ga/auto", auth: gaOps}, 200, "")
	s.want(req{method: "PATCH", path: "/v1/events/seated", auth: gaOps, body: map[string]any{"max_active": 9}}, 403, "insufficient_scope")
	s.want(req{method: "GET", path: "/v1/events", auth: gaOps}, 403, "insufficient_scope")
	s.want(req{method: "GET", path: "/v1/audit", auth: gaOps}, 403, "insufficient_scope")
	s.want(req{method: "GET", path: "/v1/audit?event_id=ga&limit=2", auth: viewer}, 200, "")
	s.want(req{method: "GET", path: "/v1/audit?limit=0", auth: A, outside: true}, 400, "invalid_query")
	s.want(req{method: "GET", path: "/v1/audit?limit=%zz", auth: A}, 400, "invalid_query") // the validator drops %zz as url.Query does
	s.want(req{method: "GET", path: "/v1/audit?limit=1&limit=abc", auth: A, outside: true}, 400, "invalid_query")
	s.want(req{method: "PATCH", path: "/v1/events/ga", auth: viewer, body: map[string]any{"max_active": 9}}, 403, "insufficient_role")
	s.want(req{method: "POST", path: "/v1/admin/keys", auth: viewer, body: map[string]any{"name": "another"}}, 403, "insufficient_role")
	s.want(req{method: "DELETE", path: "/v1/admin/keys/ops", auth: viewer}, 403, "insufficient_role")
	rv := s.want(req{method: "DELETE", path: "/v1/admin/keys/ops", auth: A}, 200, "").json(t)
	require.Equal(t, []any{"ops", "viewer"}, rv["revoked"], "a revocation takes the keys the key minted")
	s.want(req{method: "DELETE", path: "/v1/admin/keys/nobody", auth: A}, 404, "admin_key_not_found")
	s.want(req{method: "DELETE", path: "/v1/admin/keys/NOBODY", auth: A, outside: true}, 422, "invalid_key_name")
	s.want(req{method: "GET", path: "/v1/admin/keys", auth: opsKey}, 401, "unauthorized")

	// Live updates: WebSocket handshakes, SSE.
	live := s.want(req{method: "POST", path: "/v1/events/seated/tickets"}, 201, "").str(t, "ticket_id")
	wsPath := "/v1/events/seated/tickets/" + live + "/ws"
	hs13 := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for a, b := range hs13 {
			h[a] = b
		}
		h[k] = v
		return h
	}
	r = s.want(req{method: "GET", path: wsPath}, 426, "websocket_required")
	require.Equal(t, "websocket", r.header.Get("Upgrade"))
	r = s.want(req{method: "GET", path: wsPath, header: with("Sec-WebSocket-Version", "8")}, 426, "websocket_version")
	require.Equal(t, "13", r.header.Get("Sec-WebSocket-Version"))
	s.want(req{method: "GET", path: wsPath, header: with("Sec-WebSocket-Key", "short")}, 400, "invalid_handshake")
	s.want(req{method: "GET", path: wsPath, header: with("Origin", "https://elsewhere.example")}, 403, "cross_origin")
	s.want(req{method: "GET", path: "/v1/events/seated/tickets/not-a-ticket/ws", header: hs13}, 404, "ticket_not_found")
	s.want(req{method: "GET", path: "/v1/events/BAD/tickets/x/ws", header: hs13, outside: true}, 400, "invalid_event_id")
	ws := s.send(req{method: "GET", path: wsPath, header: hs13})
	require.Equal(t, http.StatusSwitchingProtocols, ws.StatusCode)
	require.NoError(t, ws.Body.Close())

	// Another ticket for the streams: the server notices the WebSocket's close asynchronously,
	// and it must not count against the per-ticket limit below.
	other := s.want(req{method: "POST", path: "/v1/events/seated/tickets"}, 201, "").str(t, "ticket_id")
	ssePath := "/v1/events/seated/tickets/" + other + "/events"
	var streams []*http.Response
	defer func() {
		for _, st := range streams {
			_ = st.Body.Close()
		}
	}()
	s.want(req{method: "GET", path: ssePath, header: map[string]string{"Origin": "https://elsewhere.example"}}, 403, "origin_not_allowed")
	first := s.send(req{method: "GET", path: ssePath, header: map[string]string{"Accept": "text/event-stream"}})
	streams = append(streams, first)
	require.Equal(t, 200, first.StatusCode)
	require.Equal(t, "text/event-stream", first.Header.Get("Content-Type"))
	s.c.validatePush(firstData(t, first.Body))
	// A ticket holds at most 8 push connections per instance.
	for range 7 {
		st := s.send(req{method: "GET", path: ssePath})
		streams = append(streams, st)
		require.Equal(t, 200, st.StatusCode)
	}
	s.want(req{method: "GET", path: ssePath}, 429, "too_many_ticket_connections")
	s.want(req{method: "GET", path: "/v1/events/seated/tickets/not-a-ticket/events"}, 404, "ticket_not_found")

	// Pages.
	s.want(req{method: "GET", path: "/e/ga"}, 200, "")
	s.want(req{method: "GET", path: "/e/nope"}, 404, "")
	s.want(req{method: "GET", path: "/admin"}, 200, "")
	pv := s.want(req{method: "GET", path: "/e/not-yet?preview=1&logo=" + url.QueryEscape("https://cdn.example")}, 200, "")
	require.Contains(t, pv.header.Get("Content-Security-Policy"), "frame-ancestors 'self'", "the console's preview")
	a := s.want(req{method: "GET", path: "/assets/room.js"}, 200, "")
	s.want(req{method: "GET", path: "/assets/waitroom.css"}, 200, "")
	s.want(req{method: "GET", path: "/assets/room.js", header: map[string]string{"If-None-Match": a.header.Get("ETag")}}, 304, "")
	s.want(req{method: "GET", path: "/assets/room.js", header: map[string]string{"If-None-Match": "*"}}, 304, "") // RFC 9110 13.1.2
	s.want(req{method: "GET", path: "/assets/room.js", header: map[string]string{"If-None-Match": `"x", W/` + a.header.Get("ETag")}}, 304, "")
	s.want(req{method: "GET", path: "/assets/room.js", header: map[string]string{"If-None-Match": `"0` + strings.Trim(a.header.Get("ETag"), `"`) + `"`}}, 200, "")
	s.want(req{method: "GET", path: "/assets/room.html"}, 404, "not_found")

	// The console: the history of an event and a campaign (with a sample at least, so that its
	// schema is checked: the instance samples every 5 s), the instances alive, the campaigns.
	eventually.True(t, 20*time.Second, "a history sample of the event and of the campaign", func() bool {
		h := s.want(req{method: "GET", path: "/v1/events/ga/history", auth: A}, 200, "")
		c := s.want(req{method: "GET", path: "/v1/campaigns/cp/history", auth: A}, 200, "")
		return len(h.json(t)["samples"].([]any)) > 0 && len(c.json(t)["samples"].([]any)) > 0
	})
	s.want(req{method: "GET", path: "/v1/events/ga/history?since=" + url.QueryEscape(ts(-time.Minute)), auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/history?since=yesterday", auth: A, outside: true}, 400, "invalid_query")
	eventually.True(t, 20*time.Second, "a minute of the long history", func() bool {
		h := s.want(req{method: "GET", path: "/v1/events/ga/history?resolution_s=60", auth: A}, 200, "")
		return strings.Contains(string(h.body), `"waiting_max"`)
	})
	s.want(req{method: "GET", path: "/v1/events/ga/history?resolution_s=600", auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/history?resolution_s=5", auth: A, outside: true}, 400, "invalid_query")
	// Admission mode auto: an event in it, an origin's health report, the controller's state
	// (with a sample at least, so that its schema is checked).
	s.want(req{method: "PUT", path: "/v1/events/auto", auth: A, body: map[string]any{"max_active": 50, "admission_mode": "auto",
		"auto": map[string]any{"target_p95_ms": 300, "error_budget": 0.02, "min_max_active": 5, "max_max_active": 50, "max_admit_rate": 100}}}, 201, "")
	s.want(req{method: "PATCH", path: "/v1/events/auto", auth: A, body: map[string]any{"auto": map[string]any{"pin_max_active": 7}}}, 200, "")
	// The origin's health URL is the operator's: an anonymous GET of the event does not show it.
	s.want(req{method: "PATCH", path: "/v1/events/auto", auth: A, body: map[string]any{"auto": map[string]any{"health_url": "http://127.0.0.1:9/health?token=secret"}}}, 200, "")
	// Only a URL the operator allows (serve --health-urls): the instances poll it.
	s.want(req{method: "PATCH", path: "/v1/events/auto", auth: A, body: map[string]any{"auto": map[string]any{"health_url": "http://169.254.169.254/latest/meta-data"}}}, 422, "invalid_field")
	require.NotContains(t, string(s.want(req{method: "GET", path: "/v1/events/auto"}, 200, "").body), "token=secret", "anonymous")
	require.Contains(t, string(s.want(req{method: "GET", path: "/v1/events/auto", auth: A}, 200, "").body), "token=secret", "an admin key")
	s.want(req{method: "PATCH", path: "/v1/events/auto", auth: A, body: map[string]any{"auto": map[string]any{"health_url": nil}}}, 200, "")
	s.want(req{method: "PATCH", path: "/v1/events/auto", auth: A, body: map[string]any{"auto": map[string]any{"pin_max_active": 70}}}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/auto2", auth: A, body: map[string]any{"max_active": 5, "admission_mode": "sometimes"}, outside: true}, 422, "invalid_field")
	// auto's bounds with mode fixed are refused, not dropped (a PUT answered "auto": null, and a
	// PATCH of out-of-range bounds of a fixed event 200); a switch to fixed drops them.
	s.want(req{method: "PUT", path: "/v1/events/auto3", auth: A, body: map[string]any{"max_active": 5, "admission_mode": "fixed",
		"auto": map[string]any{"max_max_active": 50}}}, 422, "invalid_field")
	s.want(req{method: "PATCH", path: "/v1/events/ga", auth: A, body: map[string]any{"auto": map[string]any{"target_p95_ms": 0, "error_budget": 7}}}, 422, "invalid_field")
	s.want(req{method: "PUT", path: "/v1/events/auto3", auth: A, body: map[string]any{"max_active": 5, "admission_mode": "auto",
		"auto": map[string]any{"max_max_active": 50}}}, 201, "")
	fixed := s.want(req{method: "PATCH", path: "/v1/events/auto3", auth: A, body: map[string]any{"admission_mode": "fixed"}}, 200, "").json(t)
	require.Nil(t, fixed["auto"], "the switch to fixed drops auto's bounds")
	s.want(req{method: "DELETE", path: "/v1/events/auto3", auth: A}, 204, "")
	s.want(req{method: "POST", path: "/v1/events/auto/health", auth: A, body: map[string]any{"requests": 120, "errors": 1, "p95_ms": 80.5}}, 204, "")
	s.want(req{method: "POST", path: "/v1/events/auto/health", auth: A, body: map[string]any{"requests": 1, "errors": 2, "p95_ms": 1}}, 422, "invalid_field")
	// A field left out: a forgotten p95_ms read as 0 ms, perfect health for the controller.
	s.want(req{method: "POST", path: "/v1/events/auto/health", auth: A, body: map[string]any{"requests": 5, "errors": 0}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/auto/health", auth: A, body: map[string]any{}, outside: true}, 422, "invalid_field")
	s.want(req{method: "POST", path: "/v1/events/auto/health", body: map[string]any{"requests": 1}, outside: true}, 401, "unauthorized")
	s.want(req{method: "POST", path: "/v1/events/nope/health", auth: A, body: map[string]any{"requests": 1, "errors": 0, "p95_ms": 1}}, 404, "event_not_found")
	eventually.True(t, 20*time.Second, "a step of the auto event's controller", func() bool {
		st := s.want(req{method: "GET", path: "/v1/events/auto/auto", auth: A}, 200, "").json(t)
		return st["state"] != nil && len(st["samples"].([]any)) > 0
	})
	s.want(req{method: "GET", path: "/v1/events/ga/auto?since_s=60", auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/auto?since_s=0", auth: A, outside: true}, 400, "invalid_query")
	for _, v := range []string{"1e5", "1.5", "10abc", "0x10", "5s"} { // whole seconds, nothing read past
		s.want(req{method: "GET", path: "/v1/events/ga/auto?since_s=" + url.QueryEscape(v), auth: A, outside: true}, 400, "invalid_query")
	}
	s.want(req{method: "GET", path: "/v1/events/nope/auto", auth: A}, 404, "event_not_found")
	// The report after the sale, in its three forms.
	page := s.want(req{method: "GET", path: "/v1/events/ga/report", auth: A}, 200, "")
	require.Contains(t, page.header.Get("Content-Type"), "text/html")
	require.Contains(t, string(page.body), "<h1>Report:")
	table := s.want(req{method: "GET", path: "/v1/events/ga/report?format=csv", auth: A}, 200, "")
	require.True(t, strings.HasPrefix(string(table.body), "figure,value\n"), "%s", table.body)
	s.want(req{method: "GET", path: "/v1/events/ga/report?format=json", auth: A}, 200, "")
	s.want(req{method: "GET", path: "/v1/events/ga/report?format=pdf", auth: A, outside: true}, 400, "invalid_query")
	s.want(req{method: "GET", path: "/v1/events/nope/report", auth: A}, 404, "event_not_found")
	s.want(req{method: "GET", path: "/v1/events/ga/report", outside: true}, 401, "unauthorized")
	s.want(req{method: "GET", path: "/v1/events/nope/history", auth: A}, 404, "event_not_found")
	s.want(req{method: "GET", path: "/v1/events/ga/history", outside: true}, 401, "unauthorized")
	s.want(req{method: "GET", path: "/v1/campaigns/nope/history", auth: A}, 404, "campaign_not_found")
	s.want(req{method: "GET", path: "/v1/campaigns/cp/history?since=yesterday", auth: A, outside: true}, 400, "invalid_query")
	r = s.want(req{method: "GET", path: "/v1/instances", auth: A}, 200, "")
	require.NotEmpty(t, r.json(t)["instances"])
	s.want(req{method: "GET", path: "/v1/instances", outside: true}, 401, "unauthorized")
	r = s.want(req{method: "GET", path: "/v1/campaigns", auth: A}, 200, "")
	require.Contains(t, string(r.body), `"campaign_id":"cp"`)
	s.want(req{method: "GET", path: "/v1/campaigns", outside: true}, 401, "unauthorized")

	// Leaving, deleting.
	s.want(req{method: "DELETE", path: "/v1/events/ga/tickets/" + id3}, 204, "")
	s.want(req{method: "DELETE", path: "/v1/events/ga/tickets/" + id3}, 404, "ticket_not_found")
	s.want(req{method: "GET", path: "/v1/events/ga/admission", auth: tok3}, 401, "admission_not_live")
	s.want(req{method: "DELETE", path: "/v1/events/free", outside: true}, 401, "unauthorized")
	// Delete with If-Match: only at that version (the event stays).
	fv := s.want(req{method: "GET", path: "/v1/events/free"}, 200, "").header.Get("ETag")
	r = s.want(req{method: "DELETE", path: "/v1/events/free", auth: A, header: map[string]string{"If-Match": `"999"`}}, 412, "precondition_failed")
	require.Equal(t, fv, r.header.Get("ETag"))
	s.want(req{method: "GET", path: "/v1/events/free"}, 200, "")
	s.want(req{method: "DELETE", path: "/v1/events/nope", auth: A, header: map[string]string{"If-Match": "*"}}, 412, "precondition_failed")
	s.want(req{method: "DELETE", path: "/v1/events/nope", auth: A, header: map[string]string{"If-Match": `"1"`}}, 412, "precondition_failed")
	s.want(req{method: "DELETE", path: "/v1/events/free", auth: A, header: map[string]string{"If-Match": fv}}, 204, "")
	s.want(req{method: "PUT", path: "/v1/events/free", auth: A, body: map[string]any{"max_active": 1}}, 201, "")
	s.want(req{method: "DELETE", path: "/v1/events/free", auth: A, header: map[string]string{"If-Match": "*"}}, 204, "")
	s.want(req{method: "PUT", path: "/v1/events/free", auth: A, body: map[string]any{"max_active": 1}}, 201, "")
	s.want(req{method: "DELETE", path: "/v1/events/free", auth: A}, 204, "")
	s.want(req{method: "DELETE", path: "/v1/events/free", auth: A}, 404, "event_not_found")
	s.want(req{method: "DELETE", path: "/v1/events/BAD", auth: A, outside: true}, 400, "invalid_event_id")
}

// firstData reads an SSE stream up to its first "data:" line and returns the JSON it carries.
func firstData(t testing.TB, body io.Reader) []byte {
	t.Helper()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return []byte(data)
		}
	}
	t.Fatalf("the SSE stream ended without a data line: %v", sc.Err())
	return nil
}

func redisURL() string {
	if u := strings.TrimSpace(getenv("TEST_REDIS_URL")); u != "" {
		return u
	}
	return redistest.DefaultURL
}

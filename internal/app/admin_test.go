package app_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/captcha/captchatest"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestStrictBodies: every request body takes its member names exactly and once (issue 20, item
// 16: {"MAX_ACTIVE":42} was taken for max_active, and {"Paused":true,"paused":false} chose a
// variant), on the event writes, the merge patch and the sale's bodies alike.
func TestStrictBodies(t *testing.T) {
	base := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)}).srv.URL
	r := putEvent(t, base, "strict", `{"MAX_ACTIVE":42}`)
	require.Equal(t, 422, r.code, r.raw)
	require.Contains(t, str(r, "detail"), `unknown field "MAX_ACTIVE"`)
	require.Equal(t, 400, putEvent(t, base, "strict", `{"max_active":1,"max_active":2}`).code, "a name given twice")
	require.Equal(t, 422, putEvent(t, base, "strict", `{"max_active":1,"limits":{"Joins_Per_Client":1}}`).code)
	require.Equal(t, 201, putEvent(t, base, "strict", `{"max_active":1}`).code)

	p := call(t, base, "PATCH", "/v1/events/strict", adminKey, `{"Paused":true,"paused":false}`)
	require.Equal(t, 422, p.code, p.raw)
	require.Contains(t, str(p, "detail"), `unknown field "Paused"`)
	require.Equal(t, 400, call(t, base, "PATCH", "/v1/events/strict", adminKey, `{"paused":true,"paused":false}`).code)
	require.Equal(t, 422, call(t, base, "PATCH", "/v1/events/strict", adminKey, `{"Max_Active":5}`).code)
	g := call(t, base, "GET", "/v1/events/strict", "", "")
	require.Equal(t, false, g.body["paused"])
	require.EqualValues(t, 1, g.body["max_active"], "nothing of the refused bodies was taken")

	require.Equal(t, 422, call(t, base, "PUT", "/v1/campaigns/c", adminKey, `{"Stock":1}`).code)
	require.Equal(t, 422, call(t, base, "POST", "/v1/events/strict/extend", adminKey, `{"SECONDS":60}`).code)
	require.Equal(t, 422, call(t, base, "POST", "/v1/admin/keys", adminKey, `{"Name":"x"}`).code)
}

// fixedStoreClock returns a store clock stopped a second into the current minute, so that the
// counts of fixed windows (failed admin authentications) are the test's alone and a run never
// straddles a window's edge.
func fixedStoreClock() func() time.Time {
	at := time.Now().Truncate(time.Minute).Add(time.Second)
	return func() time.Time { return at }
}

// auditEntries reads the audit trail (newest first) through the API, from 127.0.0.1.
func auditEntries(t *testing.T, base, query string) []map[string]any {
	t.Helper()
	a := call(t, base, "GET", "/v1/audit"+query, adminKey, "")
	require.Equal(t, 200, a.code, a.raw)
	var out []map[string]any
	for _, e := range a.body["entries"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// TestAuditKeepsItsActor: an admin request is authenticated once and its actor travels with it
// to the audit trail (issue 20, item 7). alice's PUT is authenticated; while the server waits
// for its body (it has answered 100 Continue), alice's address uses up its failed admin
// authentications, so that a second authentication would now be refused; the PUT completes
// and its audit entry names alice (it named "" when the audit authenticated again). On both
// backends.
func TestAuditKeepsItsActor(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := backendConfig(t, backend)
			cfg.StoreClock = fixedStoreClock()
			in := start(t, cfg)
			base := in.srv.URL
			k := call(t, base, "POST", "/v1/admin/keys", adminKey, `{"name":"alice"}`)
			require.Equal(t, 201, k.code, k.raw)
			alice := str(k, "key")

			const source = "127.0.0.21" // alice's address, not the test's 127.0.0.1
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
			conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
			body := `{"max_active":7}`
			_, err = fmt.Fprintf(conn, "PUT /v1/events/actor HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
				"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", alice, len(body))
			require.NoError(t, err)
			br := bufio.NewReader(conn)
			cont, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusContinue, cont.StatusCode, "the handler reads the body: the request is authenticated")

			guesser := clientFrom(t, source)
			for i := range 10 {
				require.Equal(t, 401, callBearerFrom(t, guesser, base, "GET", "/v1/events", "guess-"+strconv.Itoa(i)).code)
			}
			require.Equal(t, 429, callBearerFrom(t, guesser, base, "GET", "/v1/events", alice).code,
				"alice's address is over its failed authentications: a new authentication is refused")

			_, err = io.WriteString(conn, body)
			require.NoError(t, err)
			res, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			_ = res.Body.Close()
			require.Equal(t, 201, res.StatusCode, "the action authenticated at its start completes")

			entries := auditEntries(t, base, "?event_id=actor")
			require.Len(t, entries, 1)
			require.Equal(t, "alice", entries[0]["admin"], "the action is recorded with its actor")
			require.Equal(t, "event.put", entries[0]["action"])
			require.Equal(t, source, entries[0]["address"])
			for _, e := range auditEntries(t, base, "") {
				require.NotEmpty(t, e["admin"], "no audited action without its actor: %v", e)
			}
		})
	}
}

// callFrom sends a bodiless request with a bearer through client and returns its status.
func callBearerFrom(t *testing.T, client *http.Client, base, method, path, bearer string) resp {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+bearer)
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, header: res.Header, raw: string(raw)}
}

// TestDottedGuessesCount: every bearer that is not an admin key counts as a failed admin
// authentication, dots or not (issue 20, item 11: a bearer holding a "." was taken for a JWT and
// never counted: 2,000 guesses, no lockout), on the admin routes and on the routes that also
// take another bearer; the other bearer itself, when valid, does not count. On both backends.
func TestDottedGuessesCount(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := backendConfig(t, backend)
			cfg.StoreClock = fixedStoreClock()
			base := start(t, cfg).srv.URL
			require.Equal(t, 201, call(t, base, "PUT", "/v1/campaigns/dots", adminKey, `{"stock":5}`).code)
			id, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u1", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(identityKey))
			require.NoError(t, err)
			require.Equal(t, 202, call(t, base, "POST", "/v1/campaigns/dots/entries", "", `{"identity":"`+id+`"}`).code)
			for range 12 { // a user reading their entry with their identity token: no admin attempt
				require.Equal(t, 200, call(t, base, "GET", "/v1/campaigns/dots/entries/u1", id, "").code)
			}
			// A visitor's valid admission token on bookings that are not its own: no admin
			// attempt either (a visitor behind the operator's address would lock it out).
			admitted := func(ev string) string {
				require.Equal(t, 201, call(t, base, "PUT", "/v1/events/"+ev, adminKey, `{"max_active":5,"capacity":5}`).code)
				tk := call(t, base, "POST", "/v1/events/"+ev+"/tickets", "", "{}")
				require.Equal(t, 201, tk.code, tk.raw)
				var tok string
				eventually.True(t, 10*time.Second, "admitted", func() bool {
					tok = str(call(t, base, "GET", "/v1/events/"+ev+"/tickets/"+str(tk, "ticket_id"), "", ""), "admission_token")
					return tok != ""
				})
				return tok
			}
			toks := []string{admitted("dots"), admitted("dots-other")} // this event's, and another's
			for i := range 12 {
				g := call(t, base, "GET", "/v1/events/dots/bookings/bk_none"+strconv.Itoa(i), toks[i%2], "")
				require.Equal(t, 401, g.code, g.raw)
				require.Equal(t, "unauthorized", str(g, "code"))
			}
			require.Equal(t, 200, call(t, base, "GET", "/v1/events", adminKey, "").code)

			for i := range 5 {
				require.Equal(t, 401, call(t, base, "GET", "/v1/events", "eyJhbGciOiJIUzI1NiJ9.guess."+strconv.Itoa(i), "").code)
			}
			for i := range 5 {
				g := call(t, base, "GET", "/v1/campaigns/dots/entries/u1", "not.a.jwt"+strconv.Itoa(i), "")
				require.Equal(t, 401, g.code, g.raw)
			}
			r := call(t, base, "GET", "/v1/events", adminKey, "")
			require.Equal(t, 429, r.code, "10 dotted guesses: even the right key is refused")
			require.Equal(t, "rate_limited", str(r, "code"))
		})
	}
}

// TestAuditAddressIsTheClient: behind a trusted proxy the audit trail records the client the
// proxy names (package clientaddr's rule, the one the limits use), not the proxy (issue 20,
// item 16). On both backends.
func TestAuditAddressIsTheClient(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := backendConfig(t, backend)
			cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			base := start(t, cfg).srv.URL
			r := callH(t, base, "PUT", "/v1/events/proxied", adminKey, `{"max_active":1}`, "X-Forwarded-For", "6.6.6.6, 203.0.113.7")
			require.Equal(t, 201, r.code, r.raw)
			r = callH(t, base, "POST", "/v1/events/proxied/close", adminKey, "", "Forwarded", `for="198.51.100.1"`)
			require.Equal(t, 200, r.code, r.raw)
			entries := auditEntries(t, base, "?event_id=proxied")
			require.Len(t, entries, 2)
			require.Equal(t, "127.0.0.1", entries[0]["address"], "a header the proxies do not write is not believed")
			require.Equal(t, "203.0.113.7", entries[1]["address"], "the right-most address the trusted proxy added")
		})
	}
}

// twoInstances starts two instances on one database (and, for "redis", one Redis): a fleet,
// for what must hold on every instance. The embedded deployment is one process in production;
// two on one SQLite file share the keys and the audit trail as a fleet shares PostgreSQL.
func twoInstances(t *testing.T, backend string) (x, y *instance) {
	t.Helper()
	cfg := backendConfig(t, backend)
	return start(t, cfg), start(t, cfg)
}

// mintKey mints a named key through base with the bearer by; it returns the secret.
func mintKey(t *testing.T, base, by, name, role string) string {
	t.Helper()
	body := `{"name":"` + name + `"}`
	if role != "" {
		body = `{"name":"` + name + `","role":"` + role + `"}`
	}
	r := call(t, base, "POST", "/v1/admin/keys", by, body)
	require.Equal(t, 201, r.code, r.raw)
	return str(r, "key")
}

// TestAdminRoles: named keys have roles (health_reporter, read_only, operator, key_admin; the
// root key is all-powerful): each call needs its least role (403 insufficient_role below it); a key admin
// mints roles up to its own and revokes only the keys it minted; revoking a key revokes every
// key it minted, and they fail on every instance as soon as the revocation is answered (issue
// 20, item 8). On both backends, two instances each.
func TestAdminRoles(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			x, y := twoInstances(t, backend)
			X, Y := x.srv.URL, y.srv.URL
			ro := mintKey(t, X, adminKey, "ro", "read_only")
			ops := mintKey(t, X, adminKey, "ops", "operator")
			ka := mintKey(t, X, adminKey, "ka", "key_admin")
			dflt := call(t, X, "POST", "/v1/admin/keys", adminKey, `{"name":"dflt"}`)
			require.Equal(t, "operator", str(dflt, "role"), "the default role")

			forbidden := func(r resp) {
				t.Helper()
				require.Equal(t, 403, r.code, r.raw)
				require.Equal(t, "insufficient_role", str(r, "code"))
			}
			// read_only reads, and nothing else.
			require.Equal(t, 201, putEvent(t, X, "roles", `{"max_active":2}`).code)
			require.Equal(t, 200, call(t, Y, "GET", "/v1/events", ro, "").code)
			require.Equal(t, 200, call(t, Y, "GET", "/v1/audit", ro, "").code)
			require.Equal(t, 200, call(t, Y, "GET", "/metrics", ro, "").code)
			forbidden(call(t, Y, "PATCH", "/v1/events/roles", ro, `{"max_active":3}`))
			forbidden(call(t, Y, "POST", "/v1/events/roles/tickets", ro, `{"user_id":"u1"}`))
			forbidden(call(t, Y, "PUT", "/v1/campaigns/c", ro, `{"stock":1}`))
			forbidden(call(t, Y, "POST", "/v1/admin/keys", ro, `{"name":"x","role":"read_only"}`))
			forbidden(call(t, Y, "POST", "/v1/events/roles/health", ro, `{"requests":10,"errors":0,"p95_ms":80}`))
			// health_reporter reports an origin's health, and does nothing else, not even read.
			hr := mintKey(t, X, adminKey, "hr", "health_reporter")
			require.Equal(t, 204, call(t, Y, "POST", "/v1/events/roles/health", hr, `{"requests":10,"errors":0,"p95_ms":80}`).code)
			forbidden(call(t, Y, "GET", "/v1/events", hr, ""))
			forbidden(call(t, Y, "GET", "/v1/events/roles/auto", hr, ""))
			forbidden(call(t, Y, "PATCH", "/v1/events/roles", hr, `{"max_active":3}`))
			forbidden(call(t, Y, "POST", "/v1/events/roles/tickets", hr, `{"user_id":"u1"}`))
			forbidden(call(t, Y, "POST", "/v1/admin/keys", hr, `{"name":"x","role":"health_reporter"}`))
			// operator runs the sale, and mints or revokes nothing.
			require.Equal(t, 200, call(t, Y, "PATCH", "/v1/events/roles", ops, `{"max_active":3}`).code)
			require.Equal(t, 201, call(t, Y, "POST", "/v1/events/roles/tickets", ops, `{"user_id":"u1"}`).code)
			require.Equal(t, 204, call(t, Y, "POST", "/v1/events/roles/health", ops, `{"requests":10,"errors":0,"p95_ms":80}`).code)
			forbidden(call(t, Y, "POST", "/v1/admin/keys", ops, `{"name":"x","role":"read_only"}`))
			forbidden(call(t, Y, "GET", "/v1/admin/keys", ops, ""))
			forbidden(call(t, Y, "DELETE", "/v1/admin/keys/ro", ops, ""))

			// key_admin: mints up to its own role, revokes its own lineage only.
			kaOps := mintKey(t, Y, ka, "ka-ops", "operator")
			kaSub := mintKey(t, Y, ka, "ka-sub", "key_admin")
			kaSubRO := mintKey(t, X, kaSub, "ka-sub-ro", "read_only")
			r := call(t, Y, "POST", "/v1/admin/keys", ka, `{"name":"x","role":"root"}`)
			require.Equal(t, 422, r.code, r.raw)
			require.Equal(t, "invalid_role", str(r, "code"))
			require.Equal(t, 422, call(t, Y, "POST", "/v1/admin/keys", ka, `{"name":"x","role":"admin"}`).code)
			r = call(t, Y, "POST", "/v1/admin/keys", ka, `{"name":"x","role":""}`) // not left out: minted operator before
			require.Equal(t, 422, r.code, r.raw)
			require.Equal(t, "invalid_role", str(r, "code"))
			r = call(t, Y, "POST", "/v1/admin/keys", ka, `{"name":"ka-null","role":null}`)
			require.Equal(t, 201, r.code, r.raw)
			require.Equal(t, "operator", str(r, "role"), "null is left out")
			forbidden(call(t, Y, "DELETE", "/v1/admin/keys/ops", ka, ""))
			forbidden(call(t, Y, "DELETE", "/v1/admin/keys/ka", kaSub, ""))
			require.Equal(t, 422, call(t, Y, "DELETE", "/v1/admin/keys/root", ka, "").code)
			list := call(t, Y, "GET", "/v1/admin/keys", ka, "")
			require.Equal(t, 200, list.code, list.raw)
			require.Contains(t, list.raw, `"name":"ka-sub-ro","role":"read_only","created_by":"ka-sub"`)
			require.Equal(t, 200, call(t, X, "PATCH", "/v1/events/roles", kaOps, `{"max_active":4}`).code)

			// Revoking ka takes what it minted, on both instances once answered.
			rv := call(t, X, "DELETE", "/v1/admin/keys/ka", adminKey, "")
			require.Equal(t, 200, rv.code, rv.raw)
			require.Equal(t, []any{"ka", "ka-null", "ka-ops", "ka-sub", "ka-sub-ro"}, rv.body["revoked"])
			require.Equal(t, []any{}, rv.body["untraced"], "every key's minter is known")
			require.Equal(t, 401, call(t, Y, "PATCH", "/v1/events/roles", kaOps, `{"max_active":5}`).code)
			require.Equal(t, 401, call(t, Y, "POST", "/v1/admin/keys", kaSub, `{"name":"successor","role":"key_admin"}`).code)
			require.Equal(t, 401, call(t, Y, "GET", "/v1/events", kaSubRO, "").code)
			require.Equal(t, 401, call(t, Y, "GET", "/v1/events", ka, "").code)
			require.Equal(t, 200, call(t, Y, "GET", "/v1/events", ro, "").code, "the other keys live on")

			// The audit trail names each actor.
			var creators []string
			for _, e := range auditEntries(t, X, "") {
				if e["action"] == "admin_key.create" {
					creators = append(creators, e["admin"].(string)+">"+e["after"].(map[string]any)["name"].(string))
				}
			}
			require.ElementsMatch(t, []string{"root>ro", "root>hr", "root>ops", "root>ka", "root>dflt", "ka>ka-null", "ka>ka-ops", "ka>ka-sub", "ka-sub>ka-sub-ro"}, creators)
		})
	}
}

// TestAdminKeyScope: a key minted for some events ("events") acts on those events only, as
// far as its role goes, on every instance: a call on another event, or on none (the events'
// list, the audit trail, metrics, campaigns, the keys), answers 403 insufficient_scope, so the
// health reporter an origin holds moves its own event's admission and no other's. A scoped key
// admin mints nothing (minting names no event); the scope is listed with the keys. On both
// backends, two instances each.
func TestAdminKeyScope(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			x, y := twoInstances(t, backend)
			X, Y := x.srv.URL, y.srv.URL
			for _, id := range []string{"ga", "vip", "other"} {
				require.Equal(t, 201, putEvent(t, X, id, `{"max_active":2}`).code)
			}
			mint := func(name, role, events string) resp {
				t.Helper()
				return call(t, X, "POST", "/v1/admin/keys", adminKey, `{"name":"`+name+`","role":"`+role+`","events":`+events+`}`)
			}
			r := mint("shop-hr", "health_reporter", `["ga"]`)
			require.Equal(t, 201, r.code, r.raw)
			require.Equal(t, []any{"ga"}, r.body["events"])
			hr := str(r, "key")
			r = mint("shop-ops", "operator", `["vip","ga"]`)
			require.Equal(t, 201, r.code, r.raw)
			require.Equal(t, []any{"ga", "vip"}, r.body["events"], "kept sorted")
			ops := str(r, "key")
			ka := str(mint("shop-ka", "key_admin", `["ga"]`), "key")
			r = mint("everywhere", "read_only", `null`)
			require.Equal(t, 201, r.code, r.raw)
			require.Nil(t, r.body["events"], "null: every event")
			every := str(r, "key")
			for _, bad := range []string{`[]`, `["GA"]`, `["ga","ga"]`, `"ga"`, `[1]`} {
				r := mint("bad", "operator", bad)
				require.Contains(t, []int{400, 422}, r.code, "events %s: %s", bad, r.raw)
			}
			require.Equal(t, "invalid_field", str(mint("bad", "operator", `[]`), "code"))
			var most []string
			for i := range 100 {
				most = append(most, fmt.Sprintf("%03d-%s", i, strings.Repeat("e", 60)))
			}
			r = mint("most", "health_reporter", `["`+strings.Join(most, `","`)+`"]`)
			require.Equal(t, 201, r.code, "100 events of 64 bytes: %.200s", r.raw)
			r = mint("too-many", "health_reporter", `["`+strings.Join(append(most, "one-more"), `","`)+`"]`)
			require.Equal(t, "invalid_field", str(r, "code"), "%.200s", r.raw)

			outOfScope := func(r resp) {
				t.Helper()
				require.Equal(t, 403, r.code, r.raw)
				require.Equal(t, "insufficient_scope", str(r, "code"))
			}
			report := `{"requests":10,"errors":10,"p95_ms":80}`
			require.Equal(t, 204, call(t, Y, "POST", "/v1/events/ga/health", hr, report).code)
			outOfScope(call(t, Y, "POST", "/v1/events/other/health", hr, report))
			outOfScope(call(t, Y, "POST", "/v1/events/vip/health", hr, report))

			require.Equal(t, 200, call(t, Y, "PATCH", "/v1/events/vip", ops, `{"max_active":3}`).code)
			require.Equal(t, 201, call(t, Y, "POST", "/v1/events/ga/tickets", ops, `{"user_id":"u1"}`).code)
			require.Equal(t, 200, call(t, Y, "GET", "/v1/events/ga/auto", ops, "").code)
			outOfScope(call(t, Y, "PATCH", "/v1/events/other", ops, `{"max_active":3}`))
			outOfScope(call(t, Y, "POST", "/v1/events/other/close", ops, ""))
			outOfScope(call(t, Y, "DELETE", "/v1/events/other", ops, ""))
			outOfScope(call(t, Y, "POST", "/v1/events/other/tickets", ops, `{"user_id":"u1"}`))
			outOfScope(call(t, Y, "PUT", "/v1/events/new", ops, `{"max_active":1}`))
			for _, path := range []string{"/v1/events", "/v1/audit", "/metrics", "/v1/campaigns", "/v1/instances"} {
				outOfScope(call(t, Y, "GET", path, ops, ""))
			}
			outOfScope(call(t, Y, "PUT", "/v1/campaigns/c", ops, `{"stock":1}`))
			outOfScope(call(t, Y, "POST", "/v1/admin/keys", ka, `{"name":"sub","role":"health_reporter","events":["ga"]}`))
			outOfScope(call(t, Y, "GET", "/v1/admin/keys", ka, ""))
			r = call(t, Y, "PATCH", "/v1/events/other", hr, `{"max_active":3}`)
			require.Equal(t, "insufficient_role", str(r, "code"), "the role is judged first")
			require.Equal(t, 200, call(t, Y, "GET", "/v1/events", every, "").code)
			ev := call(t, Y, "GET", "/v1/events/other", adminKey, "")
			require.Equal(t, 200, ev.code, ev.raw)
			require.EqualValues(t, 2, ev.body["max_active"], "no call out of scope changed the event")

			list := call(t, X, "GET", "/v1/admin/keys", adminKey, "")
			require.Equal(t, 200, list.code, list.raw)
			require.Contains(t, list.raw, `"name":"shop-ops","role":"operator","created_by":"root"`)
			require.Contains(t, list.raw, `"events":["ga","vip"]`)
			require.Contains(t, list.raw, `"events":null`)
		})
	}
}

// TestCaptchaSecretStaysHome: an admin key cannot have the stored captcha secret sent
// elsewhere (issue 20, item 9): a PATCH of siteverify_url alone is refused (the secret must be
// given again), a URL the operator's --captcha-siteverify-urls does not list is refused on any
// write, and an instance whose list does not cover an event's URL sends nothing to it (its
// joins answer 503) while the event can still be paused. On both backends, two instances each.
func TestCaptchaSecretStaysHome(t *testing.T) {
	const secret = "the-operators-captcha-secret"
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			shop := captchatest.New(t, secret)
			attacker := captchatest.New(t, "the-attackers-own") // on the list, as a second service of the operator's could be
			evil := captchatest.New(t, "not-listed")
			cfg := backendConfig(t, backend)
			cfg.CaptchaSiteverifyURLs = []string{shop.URL, attacker.URL}
			x, y := start(t, cfg), start(t, cfg)
			X, Y := x.srv.URL, y.srv.URL
			r := putEvent(t, X, "cap", `{"max_active":100,"challenge":{"type":"external","siteverify_url":"`+shop.URL+`","secret":"`+secret+`"}}`)
			require.Equal(t, 201, r.code, r.raw)

			p := call(t, Y, "PATCH", "/v1/events/cap", adminKey, `{"challenge":{"siteverify_url":"`+attacker.URL+`"}}`)
			require.Equal(t, 422, p.code, p.raw)
			require.Contains(t, str(p, "detail"), "challenge.secret")
			for _, body := range []string{
				`{"challenge":{"siteverify_url":"` + evil.URL + `","secret":"x"}}`,
				`{"challenge":{"siteverify_url":"` + evil.URL + `","secret":null}}`,
			} {
				p = call(t, Y, "PATCH", "/v1/events/cap", adminKey, body)
				require.Equal(t, 422, p.code, p.raw)
			}
			p = putEvent(t, Y, "cap2", `{"max_active":1,"challenge":{"type":"external","siteverify_url":"`+evil.URL+`","secret":"x"}}`)
			require.Equal(t, 422, p.code, p.raw)
			require.Contains(t, str(p, "detail"), "--captcha-siteverify-urls")
			require.Equal(t, shop.URL, call(t, Y, "GET", "/v1/events/cap", "", "").body["challenge"].(map[string]any)["siteverify_url"])

			require.Equal(t, 201, call(t, X, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+shop.Token()+`"}`).code)
			require.Len(t, shop.Requests(), 1)
			require.Equal(t, secret, shop.Requests()[0].Secret)
			require.Empty(t, attacker.Requests(), "the secret went nowhere else")
			require.Empty(t, evil.Requests())

			// An instance whose list no longer names the event's URL sends nothing to it.
			cfg.CaptchaSiteverifyURLs = []string{}
			z := start(t, cfg).srv.URL
			j := call(t, z, "POST", "/v1/events/cap/tickets", "", `{"captcha_token":"`+shop.Token()+`"}`)
			require.Equal(t, 503, j.code, j.raw)
			require.Equal(t, "challenge_unavailable", str(j, "code"))
			require.Len(t, shop.Requests(), 1, "nothing sent from the instance that does not allow the URL")
			require.Equal(t, 200, call(t, z, "PATCH", "/v1/events/cap", adminKey, `{"paused":true}`).code,
				"an event whose URL left the list can still be paused")
		})
	}
}

// TestBookingReadWhileDatabaseHangs: a booking's holder reading it while PostgreSQL does not
// answer gets 503 store_unavailable, and the reads are no failed admin authentications: the
// route checks the admin key only when the holder's own credential fails, never because the
// database did not answer.
func TestBookingReadWhileDatabaseHangs(t *testing.T) {
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	pg, dbURL := proxied(t, sqltest.Postgres(t))
	base := start(t, app.Config{DatabaseURL: dbURL, Redis: rc, RedisPrefix: prefix, StoreTimeout: time.Second,
		StoreClock: fixedStoreClock()}).srv.URL
	require.Equal(t, 201, putEvent(t, base, "gig", `{"max_active":10,"capacity":10}`).code)
	j := call(t, base, "POST", "/v1/events/gig/tickets", "", "")
	tok := str(j, "admission_token")
	h, _ := timedCall(t, base, "POST", "/v1/events/gig/holds", tok, map[string]any{"quantity": 1})
	require.Equal(t, 201, h.code, h.raw)
	b, _ := timedCall(t, base, "POST", "/v1/events/gig/bookings", tok, map[string]any{"hold_id": str(h, "hold_id")})
	require.Equal(t, 201, b.code, b.raw)
	path := "/v1/events/gig/bookings/" + str(b, "booking_id")

	pg.Hold()
	for range 10 {
		r, _ := timedCall(t, base, "GET", path, tok, nil)
		require.Equal(t, 503, r.code, r.raw)
		require.Equal(t, "store_unavailable", str(r, "code"))
	}
	pg.Release()
	r, _ := timedCall(t, base, "GET", path, adminKey, nil)
	require.Equal(t, 200, r.code, "the holder's reads counted no failed admin authentication: %s", r.raw)
}

// TestOneAuthorizationField: a request with two Authorization fields is refused on every route
// as one without, whatever they hold, since which of them a proxy in front reads and which the
// service reads would be a guess: an admin call with the key twice, a join whose admin key comes
// with another field (it is made neither for its user nor anonymously), and an admitted
// visitor's call with its admission token twice.
func TestOneAuthorizationField(t *testing.T) {
	base := start(t, backendConfig(t, "embedded")).srv.URL
	require.Equal(t, 201, call(t, base, "PUT", "/v1/events/auth2", adminKey, `{"name":"two","max_active":10}`).code)
	r := callH(t, base, "GET", "/v1/events", adminKey, "", "Authorization", "Bearer "+adminKey)
	require.Equal(t, 401, r.code, r.raw)
	require.Equal(t, "unauthorized", str(r, "code"))
	for _, other := range []string{"Bearer " + adminKey, "Bearer not-a-key", "Basic dTpw"} {
		r = callH(t, base, "POST", "/v1/events/auth2/tickets", adminKey, `{"user_id":"u1"}`, "Authorization", other)
		require.Equal(t, 401, r.code, "with %q: %s", other, r.raw)
		r = callH(t, base, "POST", "/v1/events/auth2/tickets", "", "", "Authorization", other, "Authorization", other)
		require.Equal(t, 401, r.code, "anonymous, with %q twice: %s", other, r.raw)
	}
	r = call(t, base, "GET", "/v1/events/auth2", adminKey, "")
	require.Equal(t, 200, r.code, r.raw)
	require.Zero(t, num(r, "last_number"), "no refused join took a number: %s", r.raw)

	r = call(t, base, "POST", "/v1/events/auth2/tickets", adminKey, `{"user_id":"u1"}`)
	require.Equal(t, 201, r.code, r.raw)
	tok := str(r, "admission_token")
	require.NotEmpty(t, tok, r.raw)
	require.Equal(t, 200, call(t, base, "GET", "/v1/events/auth2/admission", tok, "").code)
	r = callH(t, base, "GET", "/v1/events/auth2/admission", tok, "", "Authorization", "Bearer "+tok)
	require.Equal(t, 401, r.code, r.raw)
	require.Equal(t, "invalid_token", str(r, "code"))
}

// TestRepeatedCancelIsOneAuditEntry: cancelling a booking that is cancelled already answers
// the booking as before and changes nothing, so the audit trail holds one booking.cancel for
// it, not one per call (helper-68).
func TestRepeatedCancelIsOneAuditEntry(t *testing.T) {
	base := start(t, backendConfig(t, "embedded")).srv.URL
	require.Equal(t, 201, putEvent(t, base, "recan", `{"max_active":10,"capacity":10}`).code)
	tok := str(call(t, base, "POST", "/v1/events/recan/tickets", "", ""), "admission_token")
	h := callH(t, base, "POST", "/v1/events/recan/holds", tok, `{"quantity":1}`)
	require.Equal(t, 201, h.code, h.raw)
	b := callH(t, base, "POST", "/v1/events/recan/bookings", tok, `{"hold_id":"`+str(h, "hold_id")+`"}`)
	require.Equal(t, 201, b.code, b.raw)
	for range 3 {
		c := call(t, base, "DELETE", "/v1/events/recan/bookings/"+str(b, "booking_id"), adminKey, "")
		require.Equal(t, 200, c.code, c.raw)
		require.Equal(t, "CANCELLED", str(c, "status"))
	}
	tr := call(t, base, "GET", "/v1/audit?event_id=recan", adminKey, "")
	require.Equal(t, 200, tr.code, tr.raw)
	cancels := 0
	for _, e := range tr.body["entries"].([]any) {
		if e.(map[string]any)["action"] == "booking.cancel" {
			cancels++
		}
	}
	require.Equal(t, 1, cancels, tr.raw)
}

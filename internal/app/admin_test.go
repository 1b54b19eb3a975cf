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
				require.Equal(t, 401, callFrom(t, guesser, base, "GET", "/v1/events", "guess-"+strconv.Itoa(i)).code)
			}
			require.Equal(t, 429, callFrom(t, guesser, base, "GET", "/v1/events", alice).code,
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
func callFrom(t *testing.T, client *http.Client, base, method, path, bearer string) resp {
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

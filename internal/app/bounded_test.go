package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// proxied returns a proxy in front of the host:port of a URL, and the URL through it.
func proxied(t *testing.T, raw string) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	p, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return p, u.String()
}

// timedCall is call with a client that gives up after 15 s (a hang fails the test instead of
// holding it) and the time the answer took.
func timedCall(t *testing.T, base, method, path, auth string, body any, hdr ...string) (resp, time.Duration) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	res, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	took := time.Since(start)
	require.NoError(t, err, "%s %s hung", method, path)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{code: res.StatusCode, header: res.Header, raw: string(raw)}
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(t, json.Unmarshal(raw, &r.body), string(raw))
	}
	return r, took
}

// TestStoresThatHangAnswer503: PostgreSQL, then Redis, accept connections and never answer
// (a proxy holds every packet). The event view, a booking, a campaign and a join answer 503
// store_unavailable with Retry-After within the store timeout, never hang; once the proxy lets
// traffic through again they succeed.
func TestStoresThatHangAnswer503(t *testing.T) {
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	redisURL := redistest.URL()
	pg, dbURL := proxied(t, sqltest.Postgres(t))
	rp, rURL := proxied(t, redisURL)
	const timeout = time.Second
	const slack = time.Second // scheduling under -race on a shared machine
	in := start(t, app.Config{DatabaseURL: dbURL, RedisURL: rURL, RedisPrefix: prefix, StoreTimeout: timeout})
	base := in.srv.URL

	require.Equal(t, 201, putEvent(t, base, "gig", `{"max_active":10,"capacity":10}`).code)
	require.Equal(t, 201, call(t, base, "PUT", "/v1/campaigns/promo", adminKey, `{"stock":5}`).code)
	type buyer struct{ token, hold string }
	buy := func() buyer {
		j := call(t, base, "POST", "/v1/events/gig/tickets", "", "")
		require.Equal(t, "ADMITTED", str(j, "status"), j.raw)
		tok := str(j, "admission_token")
		h, _ := timedCall(t, base, "POST", "/v1/events/gig/holds", tok, map[string]any{"quantity": 1})
		require.Equal(t, 201, h.code, h.raw)
		return buyer{tok, str(h, "hold_id")}
	}
	first, second := buy(), buy()

	type probe struct {
		name string
		do   func() (resp, time.Duration)
	}
	probes := func(b buyer) []probe {
		return []probe{
			{"event", func() (resp, time.Duration) { return timedCall(t, base, "GET", "/v1/events/gig", "", nil) }},
			{"booking", func() (resp, time.Duration) {
				return timedCall(t, base, "POST", "/v1/events/gig/bookings", b.token, map[string]any{"hold_id": b.hold}, "Idempotency-Key", b.hold)
			}},
			{"campaign", func() (resp, time.Duration) { return timedCall(t, base, "GET", "/v1/campaigns/promo", "", nil) }},
			{"join", func() (resp, time.Duration) { return timedCall(t, base, "POST", "/v1/events/gig/tickets", "", nil) }},
			{"seats", func() (resp, time.Duration) { return timedCall(t, base, "GET", "/v1/events/gig/seats", "", nil) }},
		}
	}
	unavailable := func(store string, p probe, mayPass bool) {
		t.Helper()
		r, took := p.do()
		require.Less(t, took, timeout+slack, "%s with %s hanging answered %d after %v", p.name, store, r.code, took)
		if mayPass && r.code < 300 {
			return // this route does not touch that store
		}
		require.Equal(t, 503, r.code, "%s with %s hanging: %s", p.name, store, r.raw)
		require.Equal(t, "store_unavailable", str(r, "code"), r.raw)
		require.Equal(t, "1", r.header.Get("Retry-After"))
	}
	recovers := func(store string, p probe) {
		t.Helper()
		eventually.True(t, 15*time.Second, p.name+" to succeed once "+store+" answers again", func() bool {
			r, _ := p.do()
			return r.code >= 200 && r.code < 300
		})
	}

	pg.Hold()
	for _, p := range probes(first) {
		unavailable("PostgreSQL", p, p.name == "join" || p.name == "seats") // these touch Redis only
	}
	pg.Release()
	for _, p := range probes(first) {
		recovers("PostgreSQL", p)
	}

	rp.Hold()
	for _, p := range probes(second) {
		unavailable("Redis", p, false)
	}
	rp.Release()
	for _, p := range probes(second) {
		recovers("Redis", p)
	}
}

// TestSaleDriftRepairedAndCounted: a sold count changed in Redis from outside is repaired by
// the sale sync within 5 s, and waitroom_sale_repairs_total counts it.
func TestSaleDriftRepairedAndCounted(t *testing.T) {
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	in := start(t, app.Config{DatabaseURL: sqltest.Postgres(t), Redis: rc, RedisPrefix: prefix})
	base := in.srv.URL
	require.Equal(t, 201, putEvent(t, base, "fair", `{"max_active":10,"capacity":10}`).code)
	seats := func() int64 {
		r, _ := timedCall(t, base, "GET", "/v1/events/fair/seats", "", nil)
		require.Equal(t, 200, r.code, r.raw)
		return num(r, "sold")
	}
	eventually.True(t, 10*time.Second, "the sale to be restored", func() bool {
		r, _ := timedCall(t, base, "GET", "/v1/events/fair/seats", "", nil)
		return r.code == 200
	})
	require.NoError(t, rc.Do(context.Background(), rc.B().Hincrby().Key(prefix+"{fair}:inv").Field("sold").Increment(3).Build()).Error())
	require.Equal(t, int64(3), seats())
	eventually.True(t, 5*time.Second, "the drift to be repaired", func() bool { return seats() == 0 })
	m := call(t, base, "GET", "/metrics", adminKey, "")
	require.Contains(t, m.raw, `waitroom_sale_repairs_total{event="fair"} 1`)
}

// TestRequestDeadlineSparesStreams: every route's request context carries the store timeout as
// its deadline, except the push streams' (HandleStream), which live for minutes.
func TestRequestDeadlineSparesStreams(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), StoreTimeout: 1500 * time.Millisecond})
	deadline := func(w http.ResponseWriter, r *http.Request) {
		if d, ok := r.Context().Deadline(); ok {
			_, _ = io.WriteString(w, time.Until(d).Round(100*time.Millisecond).String())
			return
		}
		_, _ = io.WriteString(w, "none")
	}
	in.API.Handle("GET /test/bounded", http.HandlerFunc(deadline))
	in.API.HandleStream("GET /test/stream", http.HandlerFunc(deadline))
	require.Equal(t, "1.5s", call(t, in.srv.URL, "GET", "/test/bounded", "", "").raw)
	require.Equal(t, "none", call(t, in.srv.URL, "GET", "/test/stream", "", "").raw)
}

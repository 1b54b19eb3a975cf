package web_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/push"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	adminKey = "test-admin-key"
	tokenKey = "test-token-key-0123456789"
)

// instance is one embedded App (line in memory, SQLite) with the push hub and the pages.
type instance struct {
	*app.App
	hub *push.Hub
	srv *httptest.Server
}

func start(t *testing.T, hub push.Config) *instance {
	t.Helper()
	return startBehind(t, hub, nil)
}

// startBehind is start with the instance behind wrap (a proxy that refuses some requests).
func startBehind(t *testing.T, hub push.Config, wrap func(http.Handler) http.Handler) *instance {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := app.New(ctx, app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey, Logger: log,
		Push: hub})
	require.NoError(t, err)
	// Stopped last (cleanups run in reverse), and whatever fails below: the App holds the
	// database pool.
	t.Cleanup(func() { require.NoError(t, a.Stop(context.Background())) })
	require.NoError(t, a.Start(ctx))
	var handler http.Handler = a.Handler()
	if wrap != nil {
		handler = wrap(handler)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		_ = a.Hub.Stop(context.Background()) // live clients first, so that the server does not wait for them
		srv.Close()
	})
	return &instance{App: a, hub: a.Hub, srv: srv}
}

func putEvent(t *testing.T, in *instance, e event.Event) {
	t.Helper()
	e.SessionTTL, e.ClaimTTL = event.DefaultSessionTTL, event.DefaultClaimTTL
	_, _, err := in.Registry.Put(context.Background(), e, 0)
	require.NoError(t, err)
}

func get(t *testing.T, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp, string(b)
}

func TestRoomPage(t *testing.T) {
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "concert", Name: "Concert", MaxActive: 10})

	resp, body := get(t, in.srv.URL+"/e/concert", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "script-src 'self'")
	require.Contains(t, csp, "connect-src 'self' ws://"+strings.TrimPrefix(in.srv.URL, "http://"))
	require.Contains(t, csp, "frame-ancestors 'none'")
	for _, want := range []string{`aria-live="polite"`, `id="position"`, `role="progressbar"`, `id="ahead"`, `id="behind"`,
		`id="eta"`, `id="join"`, `name="viewport"`, `/assets/room.js`, `/assets/waitroom.css`} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "http://", "no external resources")
	require.NotContains(t, body, "https://", "no external resources")

	require.Contains(t, body, `<html lang="en">`)
	require.Contains(t, csp, "img-src 'self' data:;", "no other image origin without a logo")

	// The language: ?lang=, else Accept-Language's best match, else the event's, else English.
	putEvent(t, in, event.Event{ID: "kurs", MaxActive: 10, Page: event.Page{Language: "ko", LogoURL: "https://cdn.uni.example:8443/logo.png?v=2"}})
	for _, c := range []struct{ path, accept, want string }{
		{"/e/concert", "ko-KR,ko;q=0.9,en-US;q=0.8", "ko"},
		{"/e/concert", "it-IT,it;q=0.9", "en"},
		{"/e/concert", "", "en"},
		{"/e/concert?lang=ko", "en-US", "ko"},
		{"/e/kurs", "", "ko"},
		{"/e/kurs", "it-IT", "ko"},
		{"/e/kurs", "it-IT, en;q=0.5", "en"},
		{"/e/kurs?lang=xx", "nl", "ko"},
		{"/e/kurs", "not a header;;", "ko"},
		// Every language of the page, by the forms browsers send (issue 21, item 10).
		{"/e/concert", "ja-JP,ja;q=0.9", "ja"},
		{"/e/concert", "zh-CN,zh;q=0.9", "zh-Hans"},
		{"/e/concert", "zh", "zh-Hans"},
		{"/e/concert", "es-MX,es;q=0.9,en;q=0.8", "es"},
		{"/e/concert", "es-419", "es"},
		{"/e/concert", "fr-CA", "fr"},
		{"/e/concert", "de-CH, de;q=0.9", "de"},
		{"/e/concert", "pt-BR", "pt"},
		{"/e/concert", "pt-PT", "pt"},
		{"/e/concert", "nl-NL, de;q=0.7, en;q=0.3", "de"},
		{"/e/concert?lang=zh-Hans", "fr", "zh-Hans"},
		{"/e/kurs", "fr-FR, en;q=0.5", "fr"},
	} {
		resp, body := get(t, in.srv.URL+c.path, map[string]string{"Accept-Language": c.accept})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `<html lang="`+c.want+`">`, "%s with Accept-Language %q", c.path, c.accept)
		require.Equal(t, "Accept-Language", resp.Header.Get("Vary"))
		require.Equal(t, strconv.Itoa(len(body)), resp.Header.Get("Content-Length"))
	}
	resp, _ = get(t, in.srv.URL+"/e/kurs", nil)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "img-src 'self' data: https://cdn.uni.example:8443;",
		"the logo's origin, and only it, is allowed")

	for _, path := range []string{"/e/nope", "/e/NOT!VALID"} {
		resp, body = get(t, in.srv.URL+path, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.Contains(t, body, "<title>No such waiting room</title>")
		require.Equal(t, "Accept-Language", resp.Header.Get("Vary"))
		// In the visitor's language, as the page itself would be.
		resp, body = get(t, in.srv.URL+path, map[string]string{"Accept-Language": "ko-KR,ko;q=0.9"})
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.Contains(t, body, `<html lang="ko">`)
		require.Contains(t, body, "<h1>대기실을 찾을 수 없습니다</h1>")
		resp, body = get(t, in.srv.URL+path+"?lang=de", nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.Contains(t, body, "<h1>Diesen Warteraum gibt es nicht</h1>")
		require.Equal(t, strconv.Itoa(len(body)), resp.Header.Get("Content-Length"))
	}
}

// TestRoomPageWrittenByTheServer (issue 21, item 10): the page arrives with the event's title
// (heading, window title, description), its words in the visitor's language and the line's
// order in its foot, before any script runs; the operator's text is escaped wherever it lands.
func TestRoomPageWrittenByTheServer(t *testing.T) {
	in := start(t, push.Config{})
	now := time.Now()
	hostile := `Spring "concert" </title><script>alert(1)</script>`
	putEvent(t, in, event.Event{ID: "drawn", Name: "ignored: page.title wins", MaxActive: 10, OpensAt: now.Add(time.Hour),
		Page: event.Page{Title: hostile, Message: `Bring your student card <img src=x onerror=alert(2)>`}})
	putEvent(t, in, event.Event{ID: "opened", Name: "Opened", MaxActive: 10, OpensAt: now.Add(-time.Hour), PrequeueOrder: event.OrderRandom})
	putEvent(t, in, event.Event{ID: "arrival", Name: "Arrival", MaxActive: 10, OpensAt: now.Add(time.Hour), PrequeueOrder: event.OrderArrival})
	putEvent(t, in, event.Event{ID: "plain", MaxActive: 10})

	_, body := get(t, in.srv.URL+"/e/drawn", nil)
	require.NotContains(t, body, "<script>alert", "the title is escaped")
	require.NotContains(t, body, "<img src=x", "the message is escaped")
	escaped := `Spring &#34;concert&#34; &lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;`
	require.Contains(t, body, `<title>`+escaped+` – waiting room</title>`)
	require.Contains(t, body, `<h1 id="event-name">`+escaped+`</h1>`)
	require.Contains(t, body, `<meta name="description" content="Bring your student card &lt;img src=x onerror=alert(2)&gt;">`)
	require.Contains(t, body, `<span id="order" data-t="order_draw_before">Fair line: places of everyone who joins before the opening are drawn at random, then first come, first served</span>`)
	require.Contains(t, body, `<button type="button" id="join" class="primary" data-t="join">Join the line</button>`)

	_, body = get(t, in.srv.URL+"/e/drawn", map[string]string{"Accept-Language": "ko-KR"})
	require.Contains(t, body, `<html lang="ko">`)
	require.Contains(t, body, `<title>`+escaped+` – 대기실</title>`)
	require.Contains(t, body, `<button type="button" id="join" class="primary" data-t="join">줄 서기</button>`)
	require.Contains(t, body, `aria-label="대기 진행률" data-t-aria="progress_label"`)
	require.Contains(t, body, `data-t="order_draw_before">공정한 대기열: 개장 전에`)

	for _, c := range []struct{ id, accept, want string }{
		{"opened", "", `<span id="order" data-t="order_draw_after">Fair line: places of everyone who joined before the opening were drawn at random; since then, first come, first served</span>`},
		{"arrival", "", `<span id="order" data-t="order_arrival">Fair line: first come, first served</span>`},
		{"plain", "", `<span id="order" data-t="order_arrival">Fair line: first come, first served</span>`},
		{"plain", "de", `<span id="order" data-t="order_arrival">Faire Warteschlange: Wer zuerst kommt, ist zuerst dran</span>`},
		{"plain", "", `<title>plain – waiting room</title>`}, // no name: the id
		{"plain", "", `<meta name="description" content="Waiting room of plain: join the line and keep this page open until it is your turn.">`},
		{"opened", "ja", `<meta name="description" content="Openedの順番待ち：列に並び、順番が来るまでこのページを開いたままにしてください。">`},
	} {
		_, body := get(t, in.srv.URL+"/e/"+c.id, map[string]string{"Accept-Language": c.accept})
		require.Contains(t, body, c.want, "%s in %q", c.id, c.accept)
	}
}

// TestRoomPageOperatorLook (issue 21, item 10): an event's page.template is written around the
// page's card (the title escaped in it, links given rel=noopener), its page.css is linked after
// the page's own and served as text/css, and the page's policy stays as strict, allowing
// images from the logo's and the template's origins only.
func TestRoomPageOperatorLook(t *testing.T) {
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "shop", Name: `Sale <b>"now"</b>`, MaxActive: 10, Page: event.Page{
		LogoURL:  "https://logo.example/l.png",
		Template: `<header class="shop"><img src="https://cdn.shop.example/a.svg" alt="Shop"><h1>{{title}}</h1></header>` + "\n" + `<div class="wrap">{{room}}</div><footer class="shop-foot"><a href="https://shop.example/help">Help</a></footer>`,
		CSS:      ".shop { background: #123456; }\n"}})
	putEvent(t, in, event.Event{ID: "plain", MaxActive: 10})

	resp, body := get(t, in.srv.URL+"/e/shop", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<body class="templated">
<header class="shop"><img src="https://cdn.shop.example/a.svg" alt="Shop"/><h1>Sale &lt;b&gt;&#34;now&#34;&lt;/b&gt;</h1></header>
<div class="wrap"><main class="card" id="main">`)
	require.Contains(t, body, `</main></div><footer class="shop-foot"><a href="https://shop.example/help" rel="noopener noreferrer">Help</a></footer>
<footer class="foot">`)
	require.Contains(t, body, `<link rel="stylesheet" href="/assets/waitroom.css">
<link rel="stylesheet" href="/e/shop/page.css?v=1">`)
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: https://logo.example https://cdn.shop.example; ")
	for _, id := range []string{`id="position"`, `id="join"`, `id="eta"`, `id="lang"`, `id="order"`} {
		require.Contains(t, body, id, "the page's fields are kept")
	}

	resp, css := get(t, in.srv.URL+"/e/shop/page.css", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, ".shop { background: #123456; }\n", css)
	require.Equal(t, "text/css; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	resp, _ = get(t, in.srv.URL+"/e/shop/page.css", map[string]string{"If-None-Match": resp.Header.Get("ETag")})
	require.Equal(t, http.StatusNotModified, resp.StatusCode)
	for _, path := range []string{"/e/plain/page.css", "/e/nope/page.css", "/e/NOT!VALID/page.css"} {
		resp, body := get(t, in.srv.URL+path, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.Contains(t, body, `"code":"not_found"`, path)
	}

	_, body = get(t, in.srv.URL+"/e/plain", nil)
	require.Contains(t, body, "<body>\n<main", "no template: the plain layout")
	require.NotContains(t, body, "page.css")
}

// TestPagesRefuseFraming: every HTML page (the room, its not-found page, the console) refuses
// to be framed both ways: CSP frame-ancestors 'none' and X-Frame-Options: DENY for browsers and
// proxies that do not apply the policy (issue 20, item 16: clickjacking of the console).
func TestPagesRefuseFraming(t *testing.T) {
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "concert", Name: "Concert", MaxActive: 10})
	for _, path := range []string{"/e/concert", "/e/nope", "/admin"} {
		resp, _ := get(t, in.srv.URL+path, nil)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
	}
}

func TestAssets(t *testing.T) {
	in := start(t, push.Config{})
	for _, tc := range []struct{ name, ctype, contains string }{
		{"room.js", "text/javascript; charset=utf-8", "localStorage"},
		{"admin.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"console.css", "text/css; charset=utf-8", ".console"},
		{"waitroom.css", "text/css; charset=utf-8", "prefers-color-scheme"},
		{"room-text.js", "text/javascript; charset=utf-8", "한국어"},
		{"eta-range.js", "text/javascript; charset=utf-8", "WaitroomETA"},
		{"retry.js", "text/javascript; charset=utf-8", "WaitroomRetry"},
	} {
		resp, body := get(t, in.srv.URL+"/assets/"+tc.name, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.name)
		require.Equal(t, tc.ctype, resp.Header.Get("Content-Type"), tc.name)
		require.Contains(t, body, tc.contains)
		etag := resp.Header.Get("ETag")
		require.NotEmpty(t, etag)
		resp, _ = get(t, in.srv.URL+"/assets/"+tc.name, map[string]string{"If-None-Match": etag})
		require.Equal(t, http.StatusNotModified, resp.StatusCode, tc.name)
		require.NotContains(t, body, "//cdn", "no CDN")
	}
	for _, name := range []string{"nope.js", "room.html"} {
		resp, _ := get(t, in.srv.URL+"/assets/"+name, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, name)
	}
}

func TestAdminPageAndEventList(t *testing.T) {
	in := start(t, push.Config{})
	opens := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	putEvent(t, in, event.Event{ID: "b-event", Name: "B", MaxActive: 5, AdmitRate: 2, OpensAt: opens, RedirectURL: "https://shop.example/b"})
	putEvent(t, in, event.Event{ID: "a-event", Name: "A", MaxActive: 7})

	resp, body := get(t, in.srv.URL+"/admin", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `type="password"`)
	require.Contains(t, body, "/assets/admin.js")

	resp, body = get(t, in.srv.URL+"/v1/events", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, body, `"code":"unauthorized"`)
	resp, _ = get(t, in.srv.URL+"/v1/events", map[string]string{"Authorization": "Bearer wrong"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp, body = get(t, in.srv.URL+"/v1/events", map[string]string{"Authorization": "Bearer " + adminKey})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list struct {
		Events []struct {
			EventID     string     `json:"event_id"`
			Name        string     `json:"name"`
			MaxActive   int64      `json:"max_active"`
			AdmitRate   float64    `json:"admit_rate"`
			SessionTTLS int64      `json:"session_ttl_s"`
			OpensAt     *time.Time `json:"opens_at"`
			RedirectURL string     `json:"redirect_url"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Events, 2)
	require.Equal(t, "a-event", list.Events[0].EventID, "ordered by id")
	require.Equal(t, int64(7), list.Events[0].MaxActive)
	require.Nil(t, list.Events[0].OpensAt)
	b := list.Events[1]
	require.Equal(t, "B", b.Name)
	require.Equal(t, 2.0, b.AdmitRate)
	require.Equal(t, int64(300), b.SessionTTLS)
	require.True(t, opens.Equal(*b.OpensAt))
	require.Equal(t, "https://shop.example/b", b.RedirectURL)
}

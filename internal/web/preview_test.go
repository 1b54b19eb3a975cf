package web_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/push"
	"github.com/waitroom/waitroom/internal/report"
)

// TestPreviewPage: /e/{event_id}?preview=1 is the waiting page for the console's event form:
// served for an event that does not exist yet, in the language asked, framed by this origin
// only (CSP and X-Frame-Options), images from the draft logo's origin only, never cached; the
// page itself keeps refusing every frame. The console may frame its own origin and shows the
// report's style by its hash, nothing else inline.
func TestPreviewPage(t *testing.T) {
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "concert", Name: "Concert", MaxActive: 10})
	for _, path := range []string{"/e/concert?preview=1", "/e/new-one?preview=1&lang=ko&logo=" + "https%3A%2F%2Fcdn.example%2Flogo.png"} {
		resp, body := get(t, in.srv.URL+path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		csp := resp.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'self'", path)
		require.NotContains(t, csp, "frame-ancestors 'none'", path)
		require.Equal(t, "SAMEORIGIN", resp.Header.Get("X-Frame-Options"), path)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Contains(t, body, "/assets/room.js")
	}
	resp, body := get(t, in.srv.URL+"/e/new-one?preview=1&lang=ko&logo=https%3A%2F%2Fcdn.example%2Flogo.png", nil)
	require.Contains(t, body, `<html lang="ko">`)
	require.NotContains(t, body, "대기실 대기실", "no name to give: no 'waiting room of waiting room'")
	_, body = get(t, in.srv.URL+"/e/new-one?preview=1", nil)
	require.Contains(t, body, `<meta name="description" content="Lots of people want in right now.`)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "img-src 'self' data: https://cdn.example;")
	resp, _ = get(t, in.srv.URL+"/e/new-one?preview=1&logo=javascript:alert(1)", nil)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "img-src 'self' data:;", "only an http(s) origin enters the policy")
	resp, _ = get(t, in.srv.URL+"/e/new-one", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "without preview, still no such page")
	resp, _ = get(t, in.srv.URL+"/e/concert", nil)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	resp, _ = get(t, in.srv.URL+"/admin", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "style-src 'self' "+report.StyleHash+";")
	require.Contains(t, csp, "frame-src 'self'")
	require.Contains(t, csp, "frame-ancestors 'none'")
}

// TestPolicyHostIsAHost: the page's policy names its own WebSocket by the request's Host only
// when that is a host[:port]; a Host with ; * ' (which net/http lets through) would add
// directives or wildcards, and is left out ('self' stays).
func TestPolicyHostIsAHost(t *testing.T) {
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "concert", Name: "Concert", MaxActive: 10})
	for host, want := range map[string]string{
		"shop.example:8443": "connect-src 'self' ws://shop.example:8443 wss://shop.example:8443; ",
		"[::1]:80":          "connect-src 'self' ws://[::1]:80 wss://[::1]:80; ",
		"x;sandbox":         "connect-src 'self'; ",
		"a*":                "connect-src 'self'; ",
		"a',b":              "connect-src 'self'; ",
	} {
		for _, path := range []string{"/e/concert", "/admin", "/e/nope"} {
			req, err := http.NewRequest(http.MethodGet, in.srv.URL+path, nil)
			require.NoError(t, err)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			csp := resp.Header.Get("Content-Security-Policy")
			require.Contains(t, csp, want, "Host %q, %s", host, path)
			require.NotContains(t, csp, "sandbox", "Host %q, %s", host, path)
		}
	}
}

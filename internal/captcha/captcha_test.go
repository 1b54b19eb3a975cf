package captcha_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/captcha/captchatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestVerify: a token the service issued passes once, with the secret, token and address
// sent as form fields; a second use, a wrong secret and an unknown token fail with the
// service's codes.
func TestVerify(t *testing.T) {
	fake := captchatest.New(t, "the-secret")
	v := captcha.New(captcha.Config{Allowed: []string{fake.URL}})
	ctx := context.Background()
	tok := fake.Token()
	r, err := v.Verify(ctx, fake.URL, "the-secret", tok, "203.0.113.7")
	require.NoError(t, err)
	require.True(t, r.Success)
	require.Equal(t, "shop.example", r.Hostname)
	require.Equal(t, []captchatest.Request{{Secret: "the-secret", Response: tok, RemoteIP: "203.0.113.7"}}, fake.Requests())

	r, err = v.Verify(ctx, fake.URL, "the-secret", tok, "")
	require.NoError(t, err)
	require.False(t, r.Success)
	require.Equal(t, []string{"timeout-or-duplicate"}, r.ErrorCodes)
	require.Empty(t, fake.Requests()[1].RemoteIP, "remoteip left out when unknown")

	r, err = v.Verify(ctx, fake.URL, "another", fake.Token(), "")
	require.NoError(t, err)
	require.Equal(t, []string{"invalid-input-secret"}, r.ErrorCodes)
	r, err = v.Verify(ctx, fake.URL, "the-secret", "forged", "")
	require.NoError(t, err)
	require.Equal(t, []string{"invalid-input-response"}, r.ErrorCodes)
	r, err = v.Verify(ctx, fake.URL, "the-secret", string(make([]byte, captcha.MaxToken+1)), "")
	require.NoError(t, err)
	require.False(t, r.Success, "an oversized token is refused without asking")
	require.Len(t, fake.Requests(), 4)
}

// TestUnavailable: no verdict — a service that hangs (cut at the timeout), refuses
// connections, answers an HTTP error, a redirect or something else than a verdict — is
// ErrUnavailable, never a hang.
func TestUnavailable(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client hang up
		<-r.Context().Done()
	}))
	defer hang.Close()
	reply := func(code int, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if code == http.StatusFound {
				w.Header().Set("Location", "http://127.0.0.1:1/")
			}
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/siteverify"
	require.NoError(t, ln.Close())

	urls := map[string]string{
		"hangs":        hang.URL,
		"closed port":  closed,
		"HTTP 500":     reply(500, `{"success":true}`),
		"redirect":     reply(http.StatusFound, ""),
		"not JSON":     reply(200, "<html>"),
		"no verdict":   reply(200, `{"error-codes":[]}`),
		"not HTTP URL": "ftp://127.0.0.1/",
	}
	var allowed []string
	for _, u := range urls {
		allowed = append(allowed, u)
	}
	v := captcha.New(captcha.Config{Timeout: 200 * time.Millisecond, Allowed: allowed})
	for name, u := range urls {
		start := time.Now()
		_, err := v.Verify(context.Background(), u, "s", "t", "")
		require.True(t, errors.Is(err, captcha.ErrUnavailable), "%s: %v", name, err)
		require.Less(t, time.Since(start), 5*time.Second, name)
	}
}

// TestAllowList: Verify sends nothing to a URL the operator does not allow (the secret would go
// with it: issue 20, item 9), whatever an event names; by default it allows the public
// services' endpoints only; "none" allows none.
func TestAllowList(t *testing.T) {
	fake := captchatest.New(t, "the-secret")
	for name, v := range map[string]*captcha.Verifier{
		"default": captcha.New(captcha.Config{}),
		"another": captcha.New(captcha.Config{Allowed: []string{fake.URL + "?x=1"}}),
		"none":    captcha.New(captcha.Config{Allowed: []string{}}),
	} {
		_, err := v.Verify(context.Background(), fake.URL, "the-secret", fake.Token(), "")
		require.ErrorIs(t, err, captcha.ErrNotAllowed, name)
		require.ErrorIs(t, err, captcha.ErrUnavailable, name)
		require.ErrorIs(t, v.Allowed(fake.URL), captcha.ErrNotAllowed, name)
	}
	require.Empty(t, fake.Requests(), "nothing was sent")
	def := captcha.New(captcha.Config{})
	for _, u := range captcha.DefaultSiteverifyURLs {
		require.NoError(t, def.Allowed(u))
	}
	require.Error(t, def.Allowed("https://challenges.cloudflare.com/turnstile/v0/siteverify/"), "compared exactly")

	for in, want := range map[string][]string{
		"none":                         {},
		"https://a.example/siteverify": {"https://a.example/siteverify"},
		" https://a.example/v , http://127.0.0.1:8080/siteverify?k=1": {"https://a.example/v", "http://127.0.0.1:8080/siteverify?k=1"},
	} {
		got, err := captcha.ParseAllowList(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "a.example/siteverify", "ftp://a.example/", "https://user:pw@a.example/", "https://a.example/#x", "https://a.example/,"} {
		_, err := captcha.ParseAllowList(bad)
		require.Error(t, err, bad)
	}
}

package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestCreateOnlyAndTheCaptchaList: what the console's event form needs of the API (issue 21,
// item 8). PUT with If-None-Match: * creates an event and never replaces one (412 naming its
// version, the event unchanged, nothing audited); GET /v1/captcha/siteverify-urls lists the
// verification URLs the operator allows, which an external challenge may name.
func TestCreateOnlyAndTheCaptchaList(t *testing.T) {
	allowed := []string{"https://captcha.example/siteverify", "https://other.example/verify"}
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), CaptchaSiteverifyURLs: allowed})
	base := in.srv.URL
	created := callH(t, base, "PUT", "/v1/events/fresh", adminKey, `{"name":"First","max_active":5}`, "If-None-Match", "*")
	require.Equal(t, 201, created.code, created.raw)
	again := callH(t, base, "PUT", "/v1/events/fresh", adminKey, `{"name":"Second","max_active":9}`, "If-None-Match", "*")
	require.Equal(t, 412, again.code)
	require.Equal(t, "precondition_failed", str(again, "code"))
	require.Contains(t, str(again, "detail"), "exists already")
	require.Equal(t, `"1"`, again.header.Get("ETag"))
	require.EqualValues(t, 1, again.body["current_version"])
	ev := call(t, base, "GET", "/v1/events/fresh", "", "")
	require.Equal(t, "First", str(ev, "name"), "left as it was")
	require.Len(t, auditEntries(t, base, "?event_id=fresh"), 1, "the create only")
	require.Equal(t, 412, callH(t, base, "PUT", "/v1/events/fresh", adminKey, `{"max_active":9}`, "If-None-Match", `"1"`).code,
		"If-None-Match is * only")

	list := call(t, base, "GET", "/v1/captcha/siteverify-urls", adminKey, "")
	require.Equal(t, 200, list.code)
	require.Equal(t, []any{allowed[0], allowed[1]}, list.body["siteverify_urls"])
	require.Equal(t, 401, call(t, base, "GET", "/v1/captcha/siteverify-urls", "", "").code)

	def := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	l := call(t, def.srv.URL, "GET", "/v1/captcha/siteverify-urls", adminKey, "")
	require.Len(t, l.body["siteverify_urls"], len(captcha.DefaultSiteverifyURLs), "the defaults")
}

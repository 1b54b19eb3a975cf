package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
)

// TestBrowserCrossOriginJoin: a shop's own page (another origin, listed in --allowed-origins)
// joins with a JSON body and an Idempotency-Key, which makes Chromium ask first (a CORS
// preflight), and reads its ticket; a page of an origin not listed cannot read a thing.
func TestBrowserCrossOriginJoin(t *testing.T) {
	exe := chromium(t)
	var base string // the waiting room's address, set once it runs
	page := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>loading</title><script>
(async () => {
  try {
    const r = await fetch(%q + "/v1/events/xo/tickets", {method: "POST",
      headers: {"Content-Type": "application/json", "Idempotency-Key": "shop-1"}, body: "{}"});
    const t = await r.json();
    const p = await fetch(%q + "/v1/events/xo/tickets/" + t.ticket_id);
    const s = await p.json();
    document.title = ["ok", r.status, t.status, p.status, s.ticket_id === t.ticket_id, r.headers.get("X-Request-Id") !== null].join(" ");
  } catch (e) {
    document.title = "refused " + e.name;
  }
})();
</script>`, base, base)
	}
	shop := httptest.NewServer(http.HandlerFunc(page))
	t.Cleanup(shop.Close)
	other := httptest.NewServer(http.HandlerFunc(page))
	t.Cleanup(other.Close)
	_, base = startConsoleWith(t, func(c *app.Config) { c.AllowedOrigins = shop.URL })
	code, ev := adminCall(t, "PUT", base+"/v1/events/xo", `{"max_active":1}`)
	require.Equal(t, 201, code, "%v", ev)

	bctx := browser(t, exe)
	title := func(url string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(url),
			waitJS(`document.title !== "loading"`, 20*time.Second)))
		s, err := chromedp.Run(sctx, chromedp.Evaluate[string](`document.title`))
		require.NoError(t, err)
		return s
	}
	require.Equal(t, "ok 201 ADMITTED 200 true true", title(shop.URL+"/"))
	require.Equal(t, "refused TypeError", title(other.URL+"/"))
}

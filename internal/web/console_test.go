package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// startConsole starts an embedded instance whose history samples every 200 ms (so that the
// charts fill within seconds), behind an httptest server.
func startConsole(t *testing.T) (*app.App, string) { return startConsoleWith(t, nil) }

// startConsoleWith is startConsole with the configuration changed by mod (nil: none).
func startConsoleWith(t *testing.T, mod func(*app.Config)) (*app.App, string) {
	t.Helper()
	ctx := context.Background()
	cfg := app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), HistoryInterval: 200 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	a, err := app.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Stop(context.Background())) })
	require.NoError(t, a.Start(ctx))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		_ = a.Hub.Stop(context.Background())
		srv.Close()
	})
	return a, srv.URL
}

// consoleBrowser starts Chromium at desktop size and returns its context, step (run actions
// within 30 s, failing the test with what) and text (a JavaScript string expression's value).
func consoleBrowser(t *testing.T, exe string) (context.Context, func(what string, actions ...chromedp.Action[chromedp.Void]), func(expr string) string) {
	t.Helper()
	bctx := browser(t, exe)
	require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900, chromedp.EmulateScale(1))))
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, actions...), what)
	}
	text := func(expr string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](expr))
		require.NoError(t, err)
		return s
	}
	return bctx, step, text
}

// adminCall calls the API with the admin key and decodes the JSON bearerAnswer.
func adminCall(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	}
	return resp.StatusCode, m
}

// TestBrowserConsole drives the operator console in headless Chromium: log in, choose an event,
// see its charts fill, change max_active and admit_rate and pause admissions — each through
// the confirmation dialog — and check every change twice: in the API, and in the audit trail
// the console shows. It saves console-desktop.png and console-phone.png (see saveScreenshot), and checks
// that at phone width nothing is wider than the screen.
func TestBrowserConsole(t *testing.T) {
	exe := chromium(t)
	a, base := startConsole(t)
	ctx := context.Background()

	code, _ := adminCall(t, "PUT", base+"/v1/events/concert", `{"name":"Spring concert","max_active":2,"capacity":40,"session_ttl_s":600}`)
	require.Equal(t, 201, code)
	code, _ = adminCall(t, "PUT", base+"/v1/campaigns/early-bird", `{"stock":50}`)
	require.Equal(t, 201, code)
	// Some life: a few buy, people join, some leave (the processor admits the next), some enter
	// the coupon campaign; the history's samples (every 200 ms) record it.
	buyUnits(t, base, 3)
	var tickets []queue.Ticket
	for i := range 24 {
		tk, err := a.Backend.Line.Join(ctx, queue.JoinParams{Event: "concert"})
		require.NoError(t, err)
		tickets = append(tickets, tk)
		if i%3 == 2 {
			require.NoError(t, a.Backend.Line.Leave(ctx, tickets[i/3].TicketRef))
			code, _ = adminCall(t, "POST", base+"/v1/campaigns/early-bird/entries", fmt.Sprintf(`{"user_id":"u%d"}`, i))
			require.Equal(t, 202, code)
		}
		waitHistorySamples(t, base, "concert", i+1)
	}

	bctx, step, text := consoleBrowser(t, exe)
	confirm := func(what string, expect string) {
		t.Helper()
		step(what+": the confirmation", waitJS(`document.getElementById('confirm').open`, 20*time.Second))
		require.Contains(t, text(`document.getElementById('confirm-text').textContent`), expect)
		step(what+": confirmed", chromedp.Click(chromedp.ID("confirm-ok")),
			waitJS(`!document.getElementById('confirm').open`, 20*time.Second))
	}

	step("log in", chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.CSS(`#login button[type=submit]`)),
		waitJS(`!!document.querySelector('#rows button[data-event="concert"]')`, 20*time.Second))
	step("choose the event", chromedp.Click(chromedp.CSS(`#rows button[data-event="concert"]`)),
		chromedp.WaitVisible(chromedp.ID("detail")),
		waitJS(`document.querySelectorAll('#charts svg polyline').length >= 6`, 20*time.Second),
		waitJS(`document.getElementById('instances').textContent === '1 instance alive'`, 20*time.Second))
	rate := text(`document.querySelector('#stat-rate dd').textContent`)
	require.NotContains(t, []string{"0", "–", ""}, rate, "people were admitted in the last hour: the rate is not 0")

	// Measured figures (issue 21, item 9): people left while waiting, the processor admitted
	// others, whose waits were measured; the charts' Auto span is the event's life so far, and a
	// day's span reads the long history (a point a minute).
	step("the measured figures", waitJS(`(document.querySelector('#stat-time-in-line dd') || {}).textContent !== undefined &&
		!document.querySelector('#stat-time-in-line dd').textContent.startsWith('–') &&
		/admissions measured/.test(document.getElementById('stat-time-in-line').textContent)`, 20*time.Second))
	require.Contains(t, text(`document.getElementById('stat-refused').textContent`), "rate limits 0")
	require.Contains(t, text(`document.getElementById('span-note').textContent`), "Auto: the event's life")
	step("a day's span", chromedp.Click(chromedp.CSS(`#span-choice button[data-span="86400"]`)),
		waitJS(`document.getElementById('span-note').textContent.startsWith('A point every minute')`, 20*time.Second),
		waitJS(`document.querySelectorAll('#charts svg polyline').length >= 6`, 20*time.Second),
		chromedp.Click(chromedp.CSS(`#span-choice button[data-span="auto"]`)),
		waitJS(`document.getElementById('span-note').textContent.startsWith('Auto')`, 20*time.Second))
	require.Equal(t, "true", text(`String(document.getElementById('setup-warnings').hidden)`), "no warning while nothing is wrong")

	// A load balancer missing from --trusted-proxies (issue 21): its requests carry
	// X-Forwarded-For; the console says so, naming the peer and the setting.
	req, err := http.NewRequest("GET", base+"/v1/events/concert", nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-For", "198.51.100.7")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	step("the banner of a missing trusted proxy", waitJS(
		`!document.getElementById('setup-warnings').hidden && document.getElementById('setup-warnings').textContent.includes('127.0.0.1') && document.getElementById('setup-warnings').textContent.includes('--trusted-proxies')`,
		20*time.Second))

	// The report after the sale, linked from the console: shown in a frame (its style allowed
	// by hash, no script) with the event's figures, and saved as CSV.
	step("view the report", chromedp.Click(chromedp.ID("report-view")),
		waitJS(`!document.getElementById('report-frame').hidden && document.getElementById('report-frame').contentDocument &&
			document.getElementById('report-frame').contentDocument.querySelector('h1') !== null`, 20*time.Second))
	require.Equal(t, "Report: Spring concert (concert)", text(`document.getElementById('report-frame').contentDocument.querySelector('h1').textContent`))
	require.Equal(t, "27", text(`document.getElementById('report-frame').contentDocument.querySelector('#arrivals dd').textContent`),
		"the 3 buyers and the 24 joins")
	// Its style applies: the figures are a grid (the inline style sheet was not blocked).
	require.Equal(t, "grid", text(`getComputedStyle(document.getElementById('report-frame').contentDocument.querySelector('dl.figures')).display`))
	step("save the CSV", chromedp.Click(chromedp.ID("report-csv")),
		waitJS(`document.getElementById('report-status').textContent.startsWith('Saved report-concert.csv')`, 20*time.Second))

	// A rate change: max_active 2 → 5, admit_rate 0 → 20.
	// Focused, a field is left alone by the console's refreshes.
	step("type the limits", chromedp.Focus(chromedp.ID("max-active")), chromedp.SetValue(chromedp.ID("max-active"), ""),
		chromedp.SendKeys(chromedp.ID("max-active"), "5"),
		chromedp.Focus(chromedp.ID("admit-rate")), chromedp.SetValue(chromedp.ID("admit-rate"), ""),
		chromedp.SendKeys(chromedp.ID("admit-rate"), "20"),
		chromedp.Click(chromedp.ID("apply-limits")))
	confirm("the rate change", "max_active 2 → 5 and admit_rate 0 → 20")
	step("the change saved", waitJS(`document.getElementById('action-result').textContent.startsWith('Saved')`, 20*time.Second))
	code, ev := adminCall(t, "GET", base+"/v1/events/concert", "")
	require.Equal(t, 200, code)
	require.EqualValues(t, 5, ev["max_active"], "the API has the new max_active")
	require.EqualValues(t, 20, ev["admit_rate"])
	step("the change in the console's audit trail", waitJS(
		`[...document.querySelectorAll('#audit-list li')].some(li => li.textContent.includes('event.patch') && li.textContent.includes('max_active 2 → 5') && li.textContent.includes('admit_rate 0 → 20'))`,
		20*time.Second))

	// A cancelled action changes nothing.
	step("pause, then cancel", chromedp.Click(chromedp.ID("pause")), waitJS(`document.getElementById('confirm').open`, 20*time.Second),
		chromedp.Click(chromedp.ID("confirm-cancel")),
		waitJS(`document.getElementById('action-result').textContent.startsWith('Cancelled')`, 20*time.Second))
	_, ev = adminCall(t, "GET", base+"/v1/events/concert", "")
	require.Equal(t, false, ev["paused"])

	// Pause.
	step("pause", chromedp.Click(chromedp.ID("pause")))
	confirm("the pause", "Pause admissions of concert?")
	step("paused", waitJS(`document.getElementById('action-result').textContent.startsWith('Paused')`, 20*time.Second),
		waitJS(`document.getElementById('pause').textContent === 'Resume admissions'`, 20*time.Second))
	_, ev = adminCall(t, "GET", base+"/v1/events/concert", "")
	require.Equal(t, true, ev["paused"], "the API says paused")
	require.Equal(t, "paused", ev["state"])
	step("the pause in the console's audit trail", waitJS(
		`[...document.querySelectorAll('#audit-list li')].some(li => li.textContent.includes('event.patch') && li.textContent.includes('paused false → true'))`,
		20*time.Second))
	_, audit := adminCall(t, "GET", base+"/v1/audit?event_id=concert", "")
	require.Len(t, audit["entries"], 3, "the put, the rate change and the pause: nothing for the cancelled one")

	// The screenshots: the desktop, then a phone's width (nothing wider than the screen).
	step("the desktop view settles", waitJS(`document.getElementById('stat-clear') !== null`, 20*time.Second))
	saveScreenshot(t, bctx, "console-desktop.png")
	step("phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch),
		chromedp.Reload(),
		waitJS(`document.querySelectorAll('#charts svg polyline').length >= 6`, 20*time.Second))
	overflow := text(`(() => {
		const w = document.documentElement.clientWidth;
		const wide = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1 && e.offsetParent !== null && !e.closest('dialog'));
		return document.documentElement.scrollWidth > w ? 'page ' + document.documentElement.scrollWidth + ' > ' + w :
			wide.map(e => e.tagName + '#' + e.id + '.' + e.className).join(' ');
	})()`)
	require.Empty(t, overflow, "at 390 px nothing is cut off or scrolls sideways")
	saveScreenshot(t, bctx, "console-phone.png")

	// The coupon campaign: issued against stock.
	step("choose the campaign", chromedp.Click(chromedp.CSS(`#campaign-rows button`)),
		waitJS(`location.hash === '#campaign=early-bird'`, 20*time.Second),
		waitJS(`(document.querySelector('#stat-issued dd') || {}).textContent === '8 / 50'`, 20*time.Second),
		waitJS(`document.querySelectorAll('#charts svg polyline').length >= 5`, 20*time.Second))
	require.True(t, len(text(`document.getElementById('actions').hidden ? 'hidden' : ''`)) > 0, "no event actions on a campaign")
}

// waitHistorySamples waits until the event's history holds at least n samples.
func waitHistorySamples(t *testing.T, base, id string, n int) {
	t.Helper()
	eventually.True(t, 10*time.Second, fmt.Sprintf("%d samples of %s", n, id), func() bool {
		_, h := adminCall(t, "GET", base+"/v1/events/"+id+"/history", "")
		s, _ := h["samples"].([]any)
		return len(s) >= n
	})
}

// buyUnits books one unit each for n people admitted through the API (join, hold, book).
func buyUnits(t *testing.T, base string, n int) {
	t.Helper()
	for i := range n {
		code, tk := adminCall(t, "POST", base+"/v1/events/concert/tickets", fmt.Sprintf(`{"user_id":"buyer-%d"}`, i))
		require.Contains(t, []int{200, 201}, code)
		tok, _ := tk["admission_token"].(string)
		if tok == "" {
			continue // not admitted at once: the line is full
		}
		hold := bearerCall(t, "POST", base+"/v1/events/concert/holds", tok, `{"quantity":1}`)
		require.Equal(t, 201, hold.code, hold.raw)
		var h map[string]any
		require.NoError(t, json.Unmarshal([]byte(hold.raw), &h))
		bk := bearerCall(t, "POST", base+"/v1/events/concert/bookings", tok, fmt.Sprintf(`{"hold_id":%q}`, h["hold_id"]))
		require.Equal(t, 201, bk.code, bk.raw)
	}
}

type bearerAnswer struct {
	code int
	raw  string
}

func bearerCall(t *testing.T, method, url, bearer, body string) bearerAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return bearerAnswer{resp.StatusCode, string(raw)}
}

// saveScreenshot saves a full-page screenshot as name in the folder WAITROOM_SCREENSHOTS names
// (WAITROOM_SCREENSHOTS=$PWD/docs go test -run TestBrowser ./internal/web/ refreshes the
// pictures of the docs), else in the test's temporary folder: a test run never rewrites the
// tracked pictures (a clone stays clean after make test).
func saveScreenshot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // quality 100: a PNG (below: a JPEG)
	require.NoError(t, err)
	require.Greater(t, len(shot), 1000, "a picture of the page")
	dir := os.Getenv("WAITROOM_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	dst := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(dst, shot, 0o644))
	t.Logf("screenshot saved to %s (%d bytes)", dst, len(shot))
}

// TestBrowserConsoleWarnsWithoutRedirect (issue 21, item 10): the console warns, on an event
// without redirect_url, that its admitted people are sent nowhere, and says nothing on one
// with it.
func TestBrowserConsoleWarnsWithoutRedirect(t *testing.T) {
	exe := chromium(t)
	_, base := startConsole(t)
	code, _ := adminCall(t, "PUT", base+"/v1/events/nowhere", `{"name":"No redirect","max_active":2}`)
	require.Equal(t, 201, code)
	code, _ = adminCall(t, "PUT", base+"/v1/events/shop", `{"name":"Shop","max_active":2,"redirect_url":"https://shop.example/buy"}`)
	require.Equal(t, 201, code)

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.CSS(`#login button[type=submit]`)),
		waitJS(`!!document.querySelector('#rows button[data-event="nowhere"]')`, 20*time.Second),
		chromedp.Click(chromedp.CSS(`#rows button[data-event="nowhere"]`)),
		waitJS(`!!document.getElementById('no-redirect') && !document.getElementById('no-redirect').hidden`, 20*time.Second)))
	warning, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('no-redirect').textContent`))
	require.NoError(t, err)
	require.Contains(t, warning, "redirect_url is not set")
	require.Contains(t, warning, "It's your turn")
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Click(chromedp.CSS(`#rows button[data-event="shop"]`)),
		waitJS(`location.hash === '#event=shop' && document.getElementById('no-redirect').hidden`, 20*time.Second)),
		"no warning on an event with a redirect_url")
}

// TestBrowserConsoleAuto (issue 23, item 4): the console shows an event in admission mode auto
// — the objective, the origin's measured p95, errors and load as its own reports give them
// (and so no gate's own delay taken off),
// the effective limits, the signal, the controller's reason and its charts — and its actions
// work through the confirmation: hold the limits, then switch to fixed ones, each seen in the
// API afterwards.
func TestBrowserConsoleAuto(t *testing.T) {
	exe := chromium(t)
	_, base := startConsoleWith(t, func(c *app.Config) { c.AutoInterval = 200 * time.Millisecond })
	code, _ := adminCall(t, "PUT", base+"/v1/events/drop", `{"name":"Drop","max_active":40,"admission_mode":"auto","auto":{"target_p95_ms":500,"min_max_active":4,"max_max_active":40}}`)
	require.Equal(t, 201, code)
	// The origin reports its own health, fast and without errors, until the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	reported := make(chan struct{})
	t.Cleanup(func() { cancel(); <-reported })
	go func() {
		defer close(reported)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/events/drop/health", strings.NewReader(`{"requests":20,"errors":0,"p95_ms":120}`))
			req.Header.Set("Authorization", "Bearer "+adminKey)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	_, step, text := consoleBrowser(t, exe)
	confirm := func(what string) {
		t.Helper()
		step(what+": confirmed", waitJS(`document.getElementById('confirm').open`, 20*time.Second),
			chromedp.Click(chromedp.ID("confirm-ok")), waitJS(`!document.getElementById('confirm').open`, 20*time.Second))
	}
	step("log in and choose the event", chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.CSS(`#login button[type=submit]`)),
		waitJS(`!!document.querySelector('#rows button[data-event="drop"]')`, 20*time.Second),
		chromedp.Click(chromedp.CSS(`#rows button[data-event="drop"]`)),
		waitJS(`!document.getElementById('auto').hidden`, 20*time.Second))
	require.Contains(t, text(`document.getElementById('auto-objective').textContent`), "origin p95 under 500 ms")
	require.Contains(t, text(`document.getElementById('auto-objective').textContent`), "max_active 4–40")
	step("the origin's measured health", waitJS(`!!document.querySelector('#auto-p95 dd') &&
		document.querySelector('#auto-p95 dd').textContent === '120 ms' &&
		document.querySelector('#auto-errors dd').textContent === '0.00 %' &&
		document.querySelector('#auto-gate-delay dd').textContent === '0 ms' &&
		document.querySelector('#auto-signal dd').textContent !== 'missing'`, 20*time.Second),
		// The controller's model of the origin: its p95 unloaded once two windows of enough
		// requests read it (the origin answers in 120 ms), the knee's rates, the knee.
		waitJS(`document.querySelector('#auto-min-p95 dd').textContent === '120 ms' &&
			/^([0-9.,]+ \/s|not measured yet)$/.test(document.querySelector('#auto-session-rate dd').textContent) &&
			/^(yes|no)$/.test(document.querySelector('#auto-knee dd').textContent)`, 30*time.Second),
		waitJS(`document.getElementById('auto-reason').textContent.startsWith('Now: ')`, 20*time.Second),
		waitJS(`document.querySelectorAll('#auto-charts svg polyline').length >= 6`, 20*time.Second))
	ma := text(`document.querySelector('#auto-max-active dd').textContent`)
	require.Regexp(t, `^[0-9]+$`, ma, "the effective max_active")

	step("hold the limits", chromedp.Click(chromedp.ID("auto-hold")))
	confirm("hold")
	step("held", waitJS(`document.getElementById('auto-hold').textContent === 'Let the controller choose again'`, 20*time.Second))
	code, ev := adminCall(t, "GET", base+"/v1/events/drop", "")
	require.Equal(t, 200, code)
	require.Equal(t, true, ev["auto"].(map[string]any)["hold"], "held in the API")

	step("switch to fixed limits", chromedp.Click(chromedp.ID("auto-fixed")))
	confirm("fixed")
	step("fixed", waitJS(`document.getElementById('auto').hidden`, 20*time.Second))
	code, ev = adminCall(t, "GET", base+"/v1/events/drop", "")
	require.Equal(t, 200, code)
	require.Equal(t, "fixed", ev["admission_mode"], "fixed in the API")
}

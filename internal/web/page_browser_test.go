package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/push"
	"github.com/waitroom/waitroom/internal/queue"
)

// evalJS evaluates a JavaScript expression in the page.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// TestBrowserEventPage drives the page of a course enrolment in a Korean browser: the
// operator's title, message and accent colour, Korean words (Accept-Language), the countdown
// to the opening ticking, units left and the session's length, the wait as a range, "Leave the
// line" asking first (staying keeps the place, confirming gives it up), and the switch to
// English, which a reload keeps.
func TestBrowserEventPage(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	opens := time.Now().Add(time.Hour)
	// Arrival order: the pre-queue shows a place (a drawn one shows none until the opening).
	putEvent(t, in, event.Event{ID: "kurs", Name: "Spring term", MaxActive: 1, Capacity: 40, OpensAt: opens, PrequeueOrder: event.OrderArrival,
		Page: event.Page{Title: "봄 학기 수강 신청", Message: "학번을 준비해 주세요.", Language: "en",
			Colors: event.PageColors{Accent: "#7a1f1f"}}})

	bctx := browser(t, exe)
	_, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Accept-Language": "ko-KR,ko;q=0.9"}})
	require.NoError(t, err)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, actions...), what)
	}
	textIs := func(id, want string) chromedp.Action[chromedp.Void] {
		return waitJS(fmt.Sprintf(`document.getElementById(%q).textContent.trim() === %q`, id, want), 15*time.Second)
	}

	step("open the page in Korean",
		chromedp.Navigate(in.srv.URL+"/e/kurs"),
		chromedp.WaitVisible(chromedp.ID("join")),
		textIs("join", "줄 서기"),
		textIs("event-name", "봄 학기 수강 신청"),
		textIs("message", "학번을 준비해 주세요."),
		chromedp.WaitVisible(chromedp.ID("countdown")),
	)
	require.Equal(t, "ko", evalJS[string](t, bctx, `document.documentElement.lang`), "Accept-Language beats the event's default")
	joinText := evalJS[string](t, bctx, `document.getElementById('join-text').textContent`)
	require.Contains(t, joinText, "대기열은", "neutral wording before the opening")
	require.NotContains(t, strings.ToLower(joinText), "sale")
	require.Equal(t, "40개 남음", evalJS[string](t, bctx, `document.getElementById('stock').textContent`))
	require.Equal(t, "공정한 대기열: 선착순", evalJS[string](t, bctx, `document.getElementById('order').textContent`),
		"the foot names the order used: arrival")
	session := evalJS[string](t, bctx, `document.getElementById('session-note').textContent`)
	require.Contains(t, session, "30분", "session_max_s")
	require.Contains(t, session, "5분", "session_ttl_s")
	require.Equal(t, "rgb(122, 31, 31)", evalJS[string](t, bctx, `getComputedStyle(document.getElementById('join')).backgroundColor`),
		"the operator's accent")

	// The countdown ticks: about an hour, then less.
	first := evalJS[string](t, bctx, `document.getElementById('countdown-time').textContent`)
	require.Regexp(t, `^(00:59:[0-5][0-9]|01:00:00)$`, first)
	step("the countdown ticks", waitJS(fmt.Sprintf(`document.getElementById('countdown-time').textContent !== %q`, first), 5*time.Second))

	step("join", chromedp.Click(chromedp.ID("join")), chromedp.WaitVisible(chromedp.ID("view-wait")),
		textIs("position", "1"), textIs("ahead", "0명"))
	step("a wait range through the opening", waitJS(`/시간/.test(document.getElementById('eta').textContent)`, 15*time.Second))
	require.False(t, evalJS[bool](t, bctx, `document.getElementById('countdown').hidden`), "the countdown goes on while waiting")

	// Leave asks first; staying keeps the place.
	step("leave asks", chromedp.Click(chromedp.ID("leave")), waitJS(`document.getElementById('leave-confirm').open`, 5*time.Second))
	require.Equal(t, "leave-stay", evalJS[string](t, bctx, `document.activeElement.id`), "the safe answer has the focus")
	require.Equal(t, "줄에서 나가시겠습니까?", evalJS[string](t, bctx, `document.getElementById('leave-title').textContent`))
	step("stay", chromedp.Click(chromedp.ID("leave-stay")), waitJS(`!document.getElementById('leave-confirm').open`, 5*time.Second))
	require.Equal(t, "wait", evalJS[string](t, bctx, `document.body.dataset.view`))
	require.Contains(t, evalJS[string](t, bctx, `localStorage.getItem('waitroom:kurs') || ''`), `"id":`)
	st, err := in.Backend.Line.Stats(context.Background(), "kurs")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Waiting, "staying keeps the place")

	step("leave for real", chromedp.Click(chromedp.ID("leave")), waitJS(`document.getElementById('leave-confirm').open`, 5*time.Second),
		chromedp.Click(chromedp.ID("leave-yes")), chromedp.WaitVisible(chromedp.ID("view-join")))
	require.Equal(t, "", evalJS[string](t, bctx, `localStorage.getItem('waitroom:kurs') || ''`))
	eventually.True(t, 10*time.Second, "the place given up", func() bool {
		st, err := in.Backend.Line.Stats(context.Background(), "kurs")
		return err == nil && st.Waiting == 0
	})

	// The switch: English at once, and after a reload.
	step("switch to English",
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('lang'); s.value = 'en'; s.dispatchEvent(new Event('change')); })()`),
		textIs("join", "Join the line"), textIs("stock", "40 left"), textIs("order", "Fair line: first come, first served"))
	step("the choice is kept", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("join")), textIs("join", "Join the line"))
	require.Equal(t, "en", evalJS[string](t, bctx, `document.documentElement.lang`))
}

// TestBrowserFootSaysTheDraw (issue 21, item 10): on an event whose pre-queue is drawn, the
// page's foot says so before the opening, in the server's page and in the script's, and says
// the draw happened once the opening passes, without a reload.
func TestBrowserFootSaysTheDraw(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{})
	// The opening is set once the browser runs (Chromium took 4.7-5.4 s to start on a loaded
	// machine, and the page shows its countdown only before the opening), 6 s ahead.
	bctx := browser(t, exe)
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1, OpensAt: time.Now().Add(6 * time.Second), PrequeueOrder: event.OrderRandom})
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(in.srv.URL+"/e/ev?lang=fr"), chromedp.WaitVisible(chromedp.ID("countdown"))))
	require.Contains(t, evalJS[string](t, bctx, `document.getElementById('order').textContent`), "sont tirées au sort")
	require.NoError(t, chromedp.Do(sctx,
		waitJS(`document.getElementById('order').textContent.indexOf('ont été tirées au sort') > 0`, 15*time.Second)),
		"after the opening the foot says the draw was made")
	require.True(t, evalJS[bool](t, bctx, `document.getElementById('countdown').hidden`))
}

// TestBrowserWaitRange checks the page's wait range (eta-range.js) in the browser: raw ETAs that
// swing by 300 s every second move the range's median by at most an eighth of that, the P90
// is above the P50, and a steady ETA is followed within a few dozen updates.
func TestBrowserWaitRange(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1})
	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(in.srv.URL+"/e/ev"), chromedp.WaitVisible(chromedp.ID("join"))))
	raw := evalJS[string](t, bctx, `(() => {
		const e = WaitroomETA(), t0 = 1.7e12, out = [];
		for (let i = 0; i < 120; i++) {
			const now = t0 + i * 1000, eta = i < 60 ? (i % 2 ? 600 : 900) : 300;
			e.update(now, eta, 100, 0);
			out.push(e.range(now));
		}
		return JSON.stringify(out);
	})()`)
	var r [][2]float64
	require.NoError(t, json.Unmarshal([]byte(raw), &r))
	for i := 1; i < len(r); i++ {
		require.Greater(t, r[i][1], r[i][0], "P90 above P50 at %d", i)
		if i < 60 {
			require.LessOrEqual(t, math.Abs(r[i][0]-r[i-1][0]), 300.0/8+1, "swings of 300 s move the median by at most 1/8 (+1 s of clock) at %d", i)
		}
	}
	require.InDelta(t, 300, r[len(r)-1][0], 15, "a steady ETA is followed")
	require.InDelta(t, 300, r[len(r)-1][1], 50, "and the range narrows around it")
	t.Logf("swinging: P50 %.0f-%.0f s at 59; steady: %.0f-%.0f s", r[59][0], r[59][1], r[119][0], r[119][1])
}

// TestBrowserRetryPacing checks the page's reconnect pacing (retry.js) in the browser, on a
// fake clock and a fake random source: every back-off lies in [d/2, d] with d doubling from
// 1 s to 30 s; connections that die within a minute of opening count in a row (an overloaded
// instance: the page backs off instead of reconnecting every second), one that lived a minute
// starts the count again; a Retry-After is a floor, spread over [1, 1.5] times itself; and
// pages cut off together come back spread over the whole window, not in one instant.
func TestBrowserRetryPacing(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{})
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1})
	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(in.srv.URL+"/e/ev"), chromedp.WaitVisible(chromedp.ID("join"))))
	raw := evalJS[string](t, bctx, `(() => {
		const out = {};
		// The random source at its extremes: the least and the most of each window.
		const lo = WaitroomRetry(() => 0), hi = WaitroomRetry(() => 0.999999);
		out.lo = [1, 2, 3, 4, 5, 6, 7, 8].map(n => lo.backoff(n));
		out.hi = [1, 2, 3, 4, 5, 6, 7, 8].map(n => hi.backoff(n));
		// Sockets that open and die 5 s later, five times, then one that lives 61 s (fake clock).
		const r = WaitroomRetry(() => 0.999999);
		let now = 1.7e12;
		out.drops = [];
		for (let i = 0; i < 5; i++) { const opened = now; now += 5000; out.drops.push(r.dropped(now, opened)); now += 1000; }
		{ const opened = now; now += 61000; out.drops.push(r.dropped(now, opened)); }
		out.after = [lo.after(20, 1), hi.after(20, 1), lo.after(0, 1), hi.after(NaN, 6), lo.after(2, 6)];
		// 1,000 pages cut off at once, each with its own draws: their first retry.
		const firsts = [];
		for (let i = 0; i < 1000; i++) firsts.push(WaitroomRetry().dropped(now, now - 1000));
		out.firsts = firsts;
		return JSON.stringify(out);
	})()`)
	var got struct {
		Lo, Hi, Drops, After, Firsts []float64
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &got))
	for i, d := range []float64{1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000} {
		require.InDelta(t, d/2, got.Lo[i], 1, "retry %d: at least d/2", i+1)
		require.InDelta(t, d, got.Hi[i], 1, "retry %d: at most d", i+1)
	}
	require.InDeltaSlice(t, []float64{1000, 2000, 4000, 8000, 16000, 1000}, got.Drops, 1,
		"sockets dying within a minute back off further each time; one that lived a minute starts again")
	require.InDeltaSlice(t, []float64{20000, 30000, 500, 30000, 15000}, got.After, 1,
		"Retry-After is a floor spread over [1, 1.5]x; without one, the back-off")
	slices.Sort(got.Firsts)
	require.GreaterOrEqual(t, got.Firsts[0], 500.0)
	require.LessOrEqual(t, got.Firsts[len(got.Firsts)-1], 1000.0)
	require.Less(t, got.Firsts[49], 550.0, "spread: the fastest twentieth within the first tenth of the window")
	require.Greater(t, got.Firsts[949], 950.0, "spread: the slowest twentieth within the last tenth")
}

// TestBrowserHealsStalledConnection: the page reaches the service through a proxy whose
// connections stop forwarding (faultproxy.Freeze: a load balancer's path to an instance that
// went silent; new connections pass). The person is admitted while the page's WebSocket is
// frozen; the page notices the silence, connects again, and lands on the redirect_url without
// a click.
func TestBrowserHealsStalledConnection(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	proxy, err := faultproxy.New(strings.TrimPrefix(in.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	landing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Shop</title><h1 id="welcome">Welcome</h1>`)
	}))
	t.Cleanup(landing.Close)
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1, RedirectURL: landing.URL + "/buy"})
	ahead, err := in.Backend.Line.Join(context.Background(), queue.JoinParams{Event: "ev"})
	require.NoError(t, err)

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate("http://"+proxy.Addr()+"/e/ev"),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		waitJS(`document.getElementById('position').textContent === '1'`, 20*time.Second),
		waitJS(`document.getElementById('connection-text').textContent === 'Live updates'`, 20*time.Second),
		chromedp.Evaluate[chromedp.Void](`(() => {
			window.seen = [];
			const el = document.getElementById('connection-text');
			new MutationObserver(() => window.seen.push(el.textContent)).observe(el, {childList: true, characterData: true, subtree: true});
		})()`),
	))
	conns := in.hub.Counters().Conns

	proxy.Freeze()
	frozen := time.Now()
	require.NoError(t, in.Backend.Line.Leave(context.Background(), ahead.TicketRef)) // the page's turn, told into the frozen socket
	require.NoError(t, chromedp.Do(sctx, chromedp.WaitVisible(chromedp.ID("welcome"))), "the page heals and is sent on")
	took := time.Since(frozen)
	t.Logf("admitted through a new connection %s after the freeze", took)
	require.Less(t, took, 40*time.Second)
	loc, err := chromedp.Run(sctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, loc, "waitroom_token=")
	require.GreaterOrEqual(t, in.hub.Counters().Conns, conns, "the frozen socket stays open at the server")
}

// TestBrowserRejoinsWhenTheTicketIsGone: the page's connection goes silent (frozen by the
// proxy) and, when it connects again, the store no longer knows its ticket: every read and
// push connect of it answers 404 ticket_not_found (what a store that lost the ticket without a
// trace answers; the ticket is also removed from the line). The page takes a new place by
// itself, and its two tabs get one place between them (the same Idempotency-Key).
func TestBrowserRejoinsWhenTheTicketIsGone(t *testing.T) {
	exe := chromium(t)
	var gone atomic.Value // the ticket id the store no longer knows
	gone.Store("")
	in := startBehind(t, push.Config{Tick: 200 * time.Millisecond}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if id := gone.Load().(string); id != "" && strings.Contains(r.URL.Path, "/tickets/"+id) {
				httpjson.WriteProblem(w, httpjson.NewProblem(404, "ticket_not_found", "no such ticket in event ev (unknown, or it left)"))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	proxy, err := faultproxy.New(strings.TrimPrefix(in.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	// Paused: nobody is admitted, so the new place waits too.
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1, Paused: true})

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	base := "http://" + proxy.Addr()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(base+"/e/ev"),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		waitJS(`document.getElementById('connection-text').textContent === 'Live updates'`, 20*time.Second),
	))
	lostID := evalJS[string](t, bctx, `JSON.parse(localStorage.getItem('waitroom:ev')).id`)
	lostRef, err := in.Tickets.Decode("ev", lostID)
	require.NoError(t, err)
	tab2, cancel2 := chromedp.NewContext(bctx) // a second tab of the same person
	defer cancel2()
	require.NoError(t, chromedp.Do(tab2, chromedp.Navigate(base+"/e/ev"),
		waitJS(`document.getElementById('connection-text').textContent === 'Live updates'`, 20*time.Second)))

	require.NoError(t, in.Backend.Line.Leave(context.Background(), lostRef))
	gone.Store(lostID)
	proxy.Freeze()
	defer func() {
		if t.Failed() {
			t.Log(evalJS[string](t, bctx, `JSON.stringify({view: document.body.dataset.view, conn: document.getElementById('connection-text').textContent,
				stored: localStorage.getItem('waitroom:ev'), err: document.getElementById('join-error').textContent})`))
		}
	}()
	require.NoError(t, chromedp.Do(sctx,
		waitJS(fmt.Sprintf(`(JSON.parse(localStorage.getItem('waitroom:ev') || '{}').id || %q) !== %q`, lostID, lostID), 60*time.Second),
		chromedp.WaitVisible(chromedp.ID("notice")),
		waitJS(`document.body.dataset.view === 'wait' && document.getElementById('position').textContent === '1'`, 20*time.Second),
	), "the page joins again by itself")
	newID := evalJS[string](t, bctx, `JSON.parse(localStorage.getItem('waitroom:ev')).id`)
	require.NoError(t, chromedp.Do(tab2, waitJS(fmt.Sprintf(`document.body.dataset.view === 'wait' && JSON.parse(localStorage.getItem('waitroom:ev')).id === %q`, newID), 30*time.Second)))
	st, err := in.Backend.Line.Stats(context.Background(), "ev")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Waiting, "one new place for both tabs")
	t.Logf("lost %s, rejoined as %s", lostID, newID)
}

// TestBrowserRidesOutStoreOutage: while the store is away every read of the ticket and every
// push connect answers 503 store_unavailable, and the page's live connection goes silent
// (frozen by the proxy). The page keeps trying with back-off, keeps its ticket, and once the
// store answers again it follows the ticket to its admission without a click.
func TestBrowserRidesOutStoreOutage(t *testing.T) {
	exe := chromium(t)
	var outage atomic.Bool
	var refused atomic.Int64
	in := startBehind(t, push.Config{Tick: 200 * time.Millisecond}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if outage.Load() && strings.Contains(r.URL.Path, "/tickets/") {
				refused.Add(1)
				httpjson.WriteProblem(w, httpjson.NewProblem(503, "store_unavailable", "the line is unreachable right now; retry shortly"))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	proxy, err := faultproxy.New(strings.TrimPrefix(in.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	landing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Shop</title><h1 id="welcome">Welcome</h1>`)
	}))
	t.Cleanup(landing.Close)
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1, RedirectURL: landing.URL + "/buy"})
	ahead, err := in.Backend.Line.Join(context.Background(), queue.JoinParams{Event: "ev"})
	require.NoError(t, err)

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate("http://"+proxy.Addr()+"/e/ev"),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		waitJS(`document.getElementById('connection-text').textContent === 'Live updates'`, 20*time.Second),
	))
	id := evalJS[string](t, bctx, `JSON.parse(localStorage.getItem('waitroom:ev')).id`)

	outage.Store(true)
	proxy.Freeze()
	require.NoError(t, chromedp.Do(sctx, waitJS(`document.getElementById('connection-text').textContent === 'Reconnecting…'`, 30*time.Second)),
		"the page notices the silence")
	// The frozen connections end (as a blip's do, by a reset or the OS's timeout): otherwise
	// each of the browser's pooled keep-alive connections to the proxy, frozen too, costs one
	// of the page's reads a FETCH_TIMEOUT_MS before it gets a live one, and how many there are
	// depends on how the browser fetched the page's assets, not on the page.
	proxy.Cut()
	require.NoError(t, proxy.Restore())
	eventually.True(t, 30*time.Second, "the page's reads refused", func() bool { return refused.Load() >= 2 })
	require.Equal(t, id, evalJS[string](t, bctx, `JSON.parse(localStorage.getItem('waitroom:ev')).id`), "a 503 keeps the ticket")

	require.NoError(t, in.Backend.Line.Leave(context.Background(), ahead.TicketRef))
	outage.Store(false)
	back := time.Now()
	require.NoError(t, chromedp.Do(sctx, chromedp.WaitVisible(chromedp.ID("welcome"))), "the page follows the ticket once the store is back")
	t.Logf("%d reads refused during the outage; sent on %s after it", refused.Load(), time.Since(back))
}

// TestBrowserLinkNeverTakesAPlace (issue 20): a link /e/{event}?ticket=<id> — what the gate
// sends a visitor to, and what anyone can share — never replaces a live place the browser
// holds without the person's choice, and a link's ticket that does not read is dropped, not
// rejoined: nobody who opens a shared link is moved onto its author's ticket, and no ghost
// tickets are left holding places.
func TestBrowserLinkNeverTakesAPlace(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	putEvent(t, in, event.Event{ID: "ev", MaxActive: 1, Paused: true}) // every place waits
	ctx := context.Background()
	other, err := in.Line.Join(ctx, line.JoinRequest{Event: "ev", Admin: true, UserID: "the link's author"})
	require.NoError(t, err)
	otherID := in.Tickets.Encode(other.TicketRef)
	forged := strings.Repeat("A", len(otherID)) // the shape of an id, of no ticket
	lastNumber := func() int64 {
		st, err := in.Backend.Line.Stats(ctx, "ev")
		require.NoError(t, err)
		return st.LastNumber
	}

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	stored := `(JSON.parse(localStorage.getItem('waitroom:ev') || '{}').id || '')`
	// A browser without a place opens a link whose ticket is no ticket: it is dropped, and no
	// place is taken for it.
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/ev?ticket="+forged),
		waitJS(`document.body.dataset.view === 'join'`, 30*time.Second),
		waitJS(stored+` === ''`, 5*time.Second),
	), "a link's unreadable ticket is dropped")
	require.Equal(t, other.Number, lastNumber(), "no place taken for it")

	// The browser takes its own place, then opens a link to another live place: it is asked,
	// and keeping its own (the default) keeps it.
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Click(chromedp.ID("join")),
		waitJS(`document.body.dataset.view === 'wait'`, 20*time.Second),
	))
	mine := evalJS[string](t, bctx, stored)
	require.NotEmpty(t, mine)
	require.NoError(t, chromedp.Do(sctx,
		waitJS(`document.getElementById('eta').textContent.indexOf('paused') >= 0`, 10*time.Second),
	), "a paused line tells no wait, and says so (issue 21)")
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/ev?ticket="+otherID),
		chromedp.WaitVisible(chromedp.ID("link-choice")),
		chromedp.Click(chromedp.ID("link-keep")),
		waitJS(`document.body.dataset.view === 'wait' && !document.getElementById('link-choice').open`, 20*time.Second),
	), "the person is asked and keeps its place")
	require.Equal(t, mine, evalJS[string](t, bctx, stored))

	// Choosing the link's place takes it; the held one is left to its holder to end.
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/ev?ticket="+otherID),
		chromedp.WaitVisible(chromedp.ID("link-choice")),
		chromedp.Click(chromedp.ID("link-take")),
		waitJS(stored+` === `+fmt.Sprintf("%q", otherID), 20*time.Second),
	), "the person may choose the link's place")
	require.Equal(t, other.Number+1, lastNumber(), "one place of the browser's own, no other")
}

// TestBrowserYourTurnWithoutRedirect (issue 21, item 10): admitted on an event without
// redirect_url, a person sees "It's your turn" with their number, not a raw JWT: the admission
// token is folded away and shown only on request (a valid token of the ticket), the page stays
// (it keeps the session active), and its words follow the language switch.
func TestBrowserYourTurnWithoutRedirect(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	putEvent(t, in, event.Event{ID: "counter", Name: "Passport office", MaxActive: 10})
	for range 6 { // numbers 1-6 are taken; the page's is 7
		_, err := in.Backend.Line.Join(context.Background(), queue.JoinParams{Event: "counter"})
		require.NoError(t, err)
	}
	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/counter"),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		chromedp.WaitVisible(chromedp.ID("view-turn")),
		waitJS(`document.getElementById('turn-number').textContent === '7'`, 10*time.Second)))
	require.Equal(t, "It's your turn", evalJS[string](t, bctx, `document.querySelector('#view-turn h2').textContent`))
	require.Contains(t, evalJS[string](t, bctx, `document.getElementById('turn-text').textContent`), "Keep this page open")
	require.False(t, evalJS[bool](t, bctx, `document.getElementById('token-box').open`), "the token is folded away")
	require.False(t, evalJS[bool](t, bctx, `document.getElementById('token').checkVisibility()`), "and not drawn")
	require.NotContains(t, evalJS[string](t, bctx, `document.body.innerText`), "eyJ", "no JWT on the screen")
	require.Contains(t, evalJS[string](t, bctx, `document.getElementById('turn-until').textContent`), "Valid until")
	saveScreenshot(t, bctx, "your-turn.png")

	require.NoError(t, chromedp.Do(sctx, chromedp.Click(chromedp.CSS("#token-box summary")), chromedp.WaitVisible(chromedp.ID("token"))))
	claims, err := in.Admissions.Verify(evalJS[string](t, bctx, `document.getElementById('token').value`), time.Now())
	require.NoError(t, err, "on request, the admission token")
	require.Equal(t, int64(7), claims.Number)
	require.Contains(t, evalJS[string](t, bctx, `location.pathname`), "/e/counter", "the page stays")

	require.NoError(t, chromedp.Do(sctx,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('lang'); s.value = 'ja'; s.dispatchEvent(new Event('change')); })()`),
		waitJS(`document.querySelector('#view-turn h2').textContent === 'あなたの番です'`, 5*time.Second)))
	require.Equal(t, "あなたの番号", evalJS[string](t, bctx, `document.querySelector('#turn-number-box .label').textContent`))
}

// TestBrowserYourTurnOverSSE: a page that follows its ticket over SSE (its proxy refuses
// WebSocket) and stays on "It's your turn" keeps its admitted session alive while it is
// visible, reading its ticket as the hub renews a visible WebSocket page's; hidden, it lets the
// session lapse, and the stream's expired shows at once, without the page coming back first.
func TestBrowserYourTurnOverSSE(t *testing.T) {
	exe := chromium(t)
	var reads atomic.Int64 // the page's reads of its ticket
	in := startBehind(t, push.Config{Tick: 100 * time.Millisecond}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/ws") {
				http.NotFound(w, r)
				return
			}
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/events/desk/tickets/") && strings.Count(r.URL.Path, "/") == 5 {
				reads.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	})
	const ttl = 4 * time.Second
	_, _, err := in.Registry.Put(context.Background(), event.Event{ID: "desk", Name: "Help desk", MaxActive: 10,
		SessionTTL: ttl, ClaimTTL: event.DefaultClaimTTL}, 0)
	require.NoError(t, err)
	active := func() int64 {
		st, err := in.Backend.Line.Stats(context.Background(), "desk")
		require.NoError(t, err)
		return st.Active
	}

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/desk"),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		chromedp.WaitVisible(chromedp.ID("view-turn")),
		waitJS(`document.getElementById('connection-text').textContent === 'Live updates'`, 20*time.Second)))

	// A read every poll_after_s (1 s: a third of the 4 s left, rounded down): twelve of them
	// span three session lengths, which the session outlives only thanks to them (a read may
	// come up to 3 s late and still renew it).
	from := reads.Load()
	eventually.True(t, 40*time.Second, "three session lengths of the page's reads", func() bool { return reads.Load() >= from+12 })
	require.Equal(t, int64(1), active(), "renewed by the page's reads")
	require.Equal(t, "turn", evalJS[string](t, bctx, `document.body.getAttribute('data-view')`))

	require.NoError(t, chromedp.Do(sctx, chromedp.Evaluate[chromedp.Void](`(() => {
		Object.defineProperty(document, 'hidden', {value: true, configurable: true});
		Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});
		document.dispatchEvent(new Event('visibilitychange'));
	})()`)))
	hidden := reads.Load()
	require.NoError(t, chromedp.Do(sctx, waitJS(`document.body.getAttribute('data-view') === 'end'`, ttl+10*time.Second)))
	require.Equal(t, "Your turn has passed", evalJS[string](t, bctx, `document.getElementById('end-title').textContent`))
	require.Equal(t, int64(0), active())
	require.LessOrEqual(t, reads.Load(), hidden+1, "no reads while hidden (one may have been on its way)")
}

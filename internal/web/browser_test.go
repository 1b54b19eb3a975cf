package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/push"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// chromium returns the path of the Chromium binary scripts/test.sh installs, skipping the test
// when it is missing, or failing it in CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if sqltest.InCI() {
		t.Fatal("chromium is not installed (scripts/test.sh installs it unless WAITROOM_BROWSER_TESTS=0)")
	}
	t.Skip("chromium is not installed; run scripts/test.sh, or apt-get install chromium")
	return ""
}

// TestBrowserWaitingRoom drives the page in headless Chromium: join, watch the position fall
// as the people ahead are admitted and leave, get admitted and land on the event's
// redirect_url with the admission token. The waiting page is saved as waiting-room.png (see
// saveScreenshot).
func TestBrowserWaitingRoom(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})

	landing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Shop</title><h1 id="welcome">Welcome to the shop</h1>`)
	}))
	t.Cleanup(landing.Close)
	putEvent(t, in, event.Event{ID: "concert", Name: "Spring concert – tickets", MaxActive: 1,
		RedirectURL: landing.URL + "/buy?from=waitroom"})

	// Three people ahead: the first is admitted at once (one slot), two wait.
	ctx := context.Background()
	var ahead []queue.TicketRef
	for range 3 {
		tk, err := in.Backend.Line.Join(ctx, queue.JoinParams{Event: "concert"})
		require.NoError(t, err)
		ahead = append(ahead, tk.TicketRef)
	}

	bctx := browser(t, exe)

	step := func(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, actions...), what)
	}
	positionIs := func(n int) chromedp.Action[chromedp.Void] {
		return waitJS(fmt.Sprintf(`document.getElementById('position').textContent === '%d'`, n), 15*time.Second)
	}

	step("open the page and join", 30*time.Second,
		chromedp.Navigate(in.srv.URL+"/e/concert"),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		chromedp.WaitVisible(chromedp.ID("view-wait")),
		positionIs(3),
	)
	live, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('connection-text').textContent`))
	require.NoError(t, err)
	require.Equal(t, "Live updates", live, "the page follows the ticket over WebSocket")
	stored, err := chromedp.Run(bctx, chromedp.Evaluate[string](`localStorage.getItem('waitroom:concert')`))
	require.NoError(t, err)
	require.Contains(t, stored, `"id":`, "the ticket is kept in localStorage")
	countdown, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById('countdown')).display`))
	require.NoError(t, err)
	require.Equal(t, "none", countdown, "no countdown without an opens_at")
	ahead3, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("ahead")))
	require.NoError(t, err)
	require.Equal(t, "2 people", ahead3)

	// Five more people join behind; the first person ahead leaves, the processor admits the
	// second, and the page moves up.
	for range 5 {
		_, err := in.Backend.Line.Join(ctx, queue.JoinParams{Event: "concert"})
		require.NoError(t, err)
	}
	require.NoError(t, in.Backend.Line.Leave(ctx, ahead[0]))
	step("position 2, five behind", 20*time.Second, positionIs(2),
		waitJS(`document.getElementById('behind').textContent === '5 people'`, 15*time.Second))

	saveScreenshot(t, bctx, "waiting-room.png")

	// A reload keeps the place.
	step("reload keeps the place", 20*time.Second,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.ID("view-wait")),
		positionIs(2),
	)

	require.NoError(t, in.Backend.Line.Leave(ctx, ahead[1]))
	step("position 1", 20*time.Second, positionIs(1))
	require.NoError(t, in.Backend.Line.Leave(ctx, ahead[2]))

	// Admitted: the page goes to the redirect_url with the token.
	step("redirected", 20*time.Second, chromedp.WaitVisible(chromedp.ID("welcome")))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	u, err := url.Parse(loc)
	require.NoError(t, err)
	require.Equal(t, landing.URL+"/buy", u.Scheme+"://"+u.Host+u.Path)
	require.Equal(t, "waitroom", u.Query().Get("from"), "the redirect_url's own query is kept")
	claims, err := in.Admissions.Verify(u.Query().Get("waitroom_token"), time.Now())
	require.NoError(t, err, "a valid admission token is appended")
	require.Equal(t, "concert", claims.Event)
	require.Equal(t, int64(4), claims.Number)
	require.Positive(t, in.hub.Counters().DeliveredLocal, "the admission came by push")
}

// browser starts headless Chromium with a phone-sized viewport and reduced motion (the
// progress bar is drawn without its transition, so screenshots are the same every run). It
// is stopped at the end of the test.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(390, 844),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first Run starts the browser and lives as long as bctx: no timeout on it.
	require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)))
	_, err := chromedp.Call(bctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}},
	})
	require.NoError(t, err)
	return bctx
}

// waitJS waits up to timeout for a JavaScript expression to be true.
func waitJS(expr string, timeout time.Duration) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))(ctx, tg)
		return chromedp.Void{}, err
	}
}

// TestBrowserFallbacks: behind a proxy that refuses WebSocket the page follows its ticket
// over SSE; behind one that refuses SSE too, it polls. Either way it gets admitted and sent on.
func TestBrowserFallbacks(t *testing.T) {
	exe := chromium(t)
	for _, tc := range []struct {
		name    string
		refuse  []string // path suffixes the proxy answers 404
		channel string   // the connection text once following the ticket
	}{
		{"sse", []string{"/ws"}, "Live updates"},
		{"poll", []string{"/ws", "/events"}, "Updating every few seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refused atomic.Int64
			in := startBehind(t, push.Config{}, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					for _, s := range tc.refuse {
						if strings.HasSuffix(r.URL.Path, s) {
							refused.Add(1)
							http.NotFound(w, r)
							return
						}
					}
					next.ServeHTTP(w, r)
				})
			})
			landing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, `<!doctype html><title>Shop</title><h1 id="welcome">Welcome</h1>`)
			}))
			t.Cleanup(landing.Close)
			putEvent(t, in, event.Event{ID: "ev", MaxActive: 1, RedirectURL: landing.URL + "/buy"})
			first, err := in.Backend.Line.Join(context.Background(), queue.JoinParams{Event: "ev"})
			require.NoError(t, err)

			bctx := browser(t, exe)
			sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
			defer cancel()
			require.NoError(t, chromedp.Do(sctx,
				chromedp.Navigate(in.srv.URL+"/e/ev"),
				chromedp.WaitVisible(chromedp.ID("join")),
				chromedp.Click(chromedp.ID("join")),
				waitJS(`document.getElementById('position').textContent === '1'`, 20*time.Second),
				waitJS(fmt.Sprintf(`document.getElementById('connection-text').textContent === %q`, tc.channel), 20*time.Second),
			))
			require.Positive(t, refused.Load(), "the page tried the refused channel first")

			require.NoError(t, in.Backend.Line.Leave(context.Background(), first.TicketRef))
			require.NoError(t, chromedp.Do(sctx, chromedp.WaitVisible(chromedp.ID("welcome"))))
			loc, err := chromedp.Run(sctx, chromedp.Location())
			require.NoError(t, err)
			require.Contains(t, loc, "waitroom_token=")
		})
	}
}

// TestBrowserRefusedOrigin: behind a proxy that passes on the Host without the port the
// visitor wrote (nginx's $host), the page's join is refused for its Origin (403
// origin_not_allowed). The page says that it is the site's setting, not that the line is busy,
// and does not retry a join that is refused the same way each time.
func TestBrowserRefusedOrigin(t *testing.T) {
	joinRefusedForGood(t, event.Event{ID: "ev", MaxActive: 1}, true, "does not accept joins from this page's address")
}

// TestBrowserIdentityRequired: on an event that takes only joins naming their user (401
// identity_required to the page's anonymous join), the page says to join from the shop's own
// page, not that the line is busy, and does not retry a join that is refused the same way.
func TestBrowserIdentityRequired(t *testing.T) {
	joinRefusedForGood(t, event.Event{ID: "ev", MaxActive: 1, IdentityRequired: true}, false, "signed-in customers")
}

// joinRefusedForGood clicks the page's join of e (behind a proxy that drops the Host's port
// when dropPort) and checks that the page says want and made one join, not retried.
func joinRefusedForGood(t *testing.T, e event.Event, dropPort bool, want string) {
	t.Helper()
	exe := chromium(t)
	var joins atomic.Int64
	in := startBehind(t, push.Config{}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				joins.Add(1)
			}
			if dropPort {
				r.Host, _, _ = strings.Cut(r.Host, ":")
			}
			next.ServeHTTP(w, r)
		})
	})
	putEvent(t, in, e)
	ctx, cancel := context.WithTimeout(browser(t, exe), 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(in.srv.URL+"/e/"+e.ID),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.Click(chromedp.ID("join")),
		chromedp.WaitVisible(chromedp.ID("join-error")),
	))
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("join-error")))
	require.NoError(t, err)
	require.Contains(t, text, want)
	require.EqualValues(t, 1, joins.Load(), "one join, not retried")
}

// TestBrowserChallenge: on an event whose joins carry a proof of work, the page fetches a
// challenge, solves it in the Web Worker while a progress bar (role="progressbar", its
// aria-valuenow moving to 100) is shown, and joins with it; without the proof the join would
// have been refused (401 challenge_required), so reaching the line is the proof it was solved.
func TestBrowserChallenge(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	putEvent(t, in, event.Event{ID: "pow", Name: "Guarded sale", MaxActive: 1,
		Challenge: event.Challenge{Type: event.ChallengePow, Difficulty: 18}})
	_, err := in.Backend.Line.Join(context.Background(), queue.JoinParams{Event: "pow"}) // takes the slot
	require.NoError(t, err)

	bctx := browser(t, exe)
	sctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/pow"),
		chromedp.WaitVisible(chromedp.ID("join")),
		// Record what the progress bar shows while the worker runs.
		chromedp.Evaluate[chromedp.Void](`(function () {
			window.seen = {shown: false, max: 0, role: ''};
			var box = document.getElementById('challenge'), bar = document.getElementById('challenge-progress');
			new MutationObserver(function () {
				if (!box.hidden) { window.seen.shown = true; window.seen.role = bar.getAttribute('role'); }
				window.seen.max = Math.max(window.seen.max, Number(bar.getAttribute('aria-valuenow')));
			}).observe(document.getElementById('view-join'), {attributes: true, subtree: true});
		})()`),
		chromedp.Click(chromedp.ID("join")),
		chromedp.WaitVisible(chromedp.ID("view-wait")),
		waitJS(`document.getElementById('position').textContent === '1'`, 15*time.Second),
	))
	seen, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]any](`window.seen`))
	require.NoError(t, err)
	require.Equal(t, true, seen["shown"], "the progress was shown while solving")
	require.Equal(t, "progressbar", seen["role"])
	require.EqualValues(t, 100, seen["max"], "the bar reached 100 when solved")
	hidden, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.getElementById('challenge').hidden`))
	require.NoError(t, err)
	require.True(t, hidden, "the progress goes once solved")
	st, err := in.Backend.Line.Stats(context.Background(), "pow")
	require.NoError(t, err)
	require.Equal(t, int64(2), st.LastNumber, "one join of the page's, with its proof")
}

// TestBrowserReturnURL: a visitor the gate middleware sent to the line from a page of the shop
// (?return_url=, see package gate) is sent back to that page with the token once admitted, when
// it is on the redirect_url's origin; one on another origin is not followed (the parameter is
// anyone's to write): the visitor lands on the redirect_url.
func TestBrowserReturnURL(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	landing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Shop</title><h1 id="landed">Shop</h1>`)
	}))
	t.Cleanup(landing.Close)
	for _, id := range []string{"back", "foreign"} {
		putEvent(t, in, event.Event{ID: id, Name: "Sale", MaxActive: 10, RedirectURL: landing.URL + "/buy"})
	}
	for _, c := range []struct {
		event, returnURL, want string
	}{
		{"back", landing.URL + "/checkout/step?n=3", landing.URL + "/checkout/step?n=3"},
		{"foreign", "http://shop.invalid/checkout/step?n=3", landing.URL + "/buy"},
	} {
		bctx := browser(t, exe)
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		err := chromedp.Do(sctx,
			chromedp.Navigate(in.srv.URL+"/e/"+c.event+"?return_url="+url.QueryEscape(c.returnURL)),
			chromedp.WaitVisible(chromedp.ID("join")),
			chromedp.Click(chromedp.ID("join")),
			chromedp.WaitVisible(chromedp.ID("landed")),
		)
		cancel()
		require.NoError(t, err, c.event)
		loc, err := chromedp.Run(bctx, chromedp.Location())
		require.NoError(t, err)
		u, err := url.Parse(loc)
		require.NoError(t, err)
		tok := u.Query().Get("waitroom_token")
		q := u.Query()
		q.Del("waitroom_token")
		u.RawQuery = q.Encode()
		require.Equal(t, c.want, u.String(), c.event)
		_, err = in.Admissions.Verify(tok, time.Now())
		require.NoError(t, err, "%s: a valid admission token is appended", c.event)
	}
}

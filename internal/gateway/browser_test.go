package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestBrowserGate drives a browser through the gate: a visitor of /checkout?item=7 with the
// only slot taken is sent to the waiting-room page (the gate joined for it), waits there, and
// when admitted the page takes it back to /checkout?item=7, which the gate now lets through to
// the shop.
func TestBrowserGate(t *testing.T) {
	exe := ""
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			exe = path
			break
		}
	}
	if exe == "" {
		if sqltest.InCI() {
			t.Fatal("chromium is not installed (scripts/test.sh installs it unless WAITROOM_BROWSER_TESTS=0)")
		}
		t.Skip("chromium is not installed")
	}
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Shop</title><h1 id="checkout">Checkout %s %s</h1>`,
			r.URL.Query().Get("item"), r.Header.Get("X-Waitroom-Number"))
	}))
	t.Cleanup(shop.Close)
	g := startGated(t, "embedded", gateFile(t, shop.URL), 1)
	ctx := context.Background()
	first, err := g.Backend.Line.Join(ctx, queue.JoinParams{Event: testEvent})
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, first.Status)

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()))
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("about:blank")))
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, actions...), what)
	}
	step("sent to the page, in line", chromedp.Navigate(g.gate.URL+"/checkout?item=7"),
		chromedp.WaitVisible(chromedp.ID("view-wait")),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Poll[bool](`document.getElementById('position').textContent === '1'`,
				chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
			return chromedp.Void{}, err
		})
	loc, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(loc, g.gate.URL+"/e/"+testEvent+"?return="), loc)
	require.NotContains(t, loc, "ticket=", "the page drops the ticket id from the address bar")

	require.NoError(t, g.Backend.Line.Leave(ctx, first.TicketRef)) // the slot frees; the processor admits us
	step("back to the checkout", chromedp.WaitVisible(chromedp.ID("checkout")))
	loc, err = chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, g.gate.URL+"/checkout?item=7", loc)
	text, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("checkout")))
	require.NoError(t, err)
	require.Equal(t, "Checkout 7 2", text, "the shop saw the visitor's ticket number")
}

package web_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/push"
)

// TestBrowserOperatorLook (issue 21, item 10): a page in the operator's own look — their
// template around the page's card and their style sheet — keeps the page's fields (joining and
// the place in line work as ever) and its Content-Security-Policy: the template's image loads
// from its origin, which the policy names, while the style sheet's background from any other
// origin is refused by the browser (a securitypolicyviolation), and nothing is wider than the
// phone.
func TestBrowserOperatorLook(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	var pic bytes.Buffer
	require.NoError(t, png.Encode(&pic, image.NewRGBA(image.Rect(0, 0, 2, 2))))
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pic.Bytes())
	}))
	t.Cleanup(images.Close)
	putEvent(t, in, event.Event{ID: "shop", Name: "Spring sale", MaxActive: 1, Paused: true, Page: event.Page{
		Template: fmt.Sprintf(`<header class="shop"><img class="brand" src="%s/brand.png" alt="Shop" width="40" height="40"><h1>{{title}}</h1></header>
<div class="wrap">{{room}}</div>
<footer class="shop-foot"><a href="https://shop.example/help">Help</a></footer>`, images.URL),
		CSS: `.shop { display: flex; gap: 1rem; align-items: center; background: rgb(18, 52, 86); color: #fff; width: 100%; padding: 0 1rem; }
.card { border-radius: 0; }
body.templated { background-image: url(https://blocked.example/bg.png); }`}})

	bctx := browser(t, exe)
	_, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.violations = []; document.addEventListener('securitypolicyviolation', e => window.violations.push(e.effectiveDirective + ' ' + e.blockedURI));`})
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx,
		chromedp.Navigate(in.srv.URL+"/e/shop"),
		chromedp.WaitVisible(chromedp.ID("join")),
		waitJS(`document.querySelector('img.brand').complete && document.querySelector('img.brand').naturalWidth === 2`, 10*time.Second),
		waitJS(`window.violations.length > 0`, 10*time.Second)))
	require.Equal(t, "Spring sale", evalJS[string](t, bctx, `document.querySelector('header.shop h1').textContent`))
	require.Equal(t, "rgb(18, 52, 86)", evalJS[string](t, bctx, `getComputedStyle(document.querySelector('header.shop')).backgroundColor`), "page.css applies")
	require.Equal(t, "0px", evalJS[string](t, bctx, `getComputedStyle(document.getElementById('main')).borderTopLeftRadius`), "after the page's own")
	require.Equal(t, []string{"img-src https://blocked.example/bg.png"}, evalJS[[]string](t, bctx, `window.violations`),
		"the policy refuses the style sheet's image from another origin, and nothing else")

	require.NoError(t, chromedp.Do(sctx, chromedp.Click(chromedp.ID("join")), chromedp.WaitVisible(chromedp.ID("view-wait")),
		waitJS(`document.getElementById('position').textContent === '1'`, 15*time.Second)), "the card works in the template")
	d := evalJS[drawn](t, bctx, pageProblems)
	require.Empty(t, d.Overflow)
	require.Empty(t, d.Tofu)
	saveScreenshot(t, bctx, "waiting-room-own-look.png")
}

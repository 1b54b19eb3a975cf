package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/push"
)

// pageProblems is a JavaScript expression that lists what is wrong with the page as drawn:
// {tofu: characters drawn as the missing-glyph box, overflow: elements wider than the screen
// or than their own box, chars: how many distinct characters were checked, control: whether
// the check finds a character no font has}.
//
// A character is tofu when the browser draws it exactly as it draws U+10FFFD, a private-use
// code point no font has: both are then the primary font's .notdef box (or nothing), while a
// real glyph differs. Each distinct non-ASCII character of the visible text and of the
// language switch's options is drawn on a canvas in its element's own font at 32 px and
// compared pixel by pixel (its alpha channel, hashed). control draws U+0378, unassigned in
// Unicode, which must come out as tofu: the check can see a missing glyph.
const pageProblems = `(() => {
	const c = document.createElement('canvas'); c.width = 56; c.height = 56;
	const g = c.getContext('2d', {willReadFrequently: true});
	const shot = (font, ch) => {
		g.clearRect(0, 0, 56, 56); g.font = font; g.textBaseline = 'top'; g.fillStyle = '#000'; g.fillText(ch, 4, 4);
		const d = g.getImageData(0, 0, 56, 56).data; let h = 0;
		for (let i = 3; i < d.length; i += 4) h = (Math.imul(h, 31) + d[i]) | 0;
		return h;
	};
	const fontOf = el => { const s = getComputedStyle(el); return s.fontStyle + ' ' + s.fontWeight + ' 32px ' + s.fontFamily; };
	const seen = new Map(); // font -> Set of characters
	const add = (el, text) => {
		const f = fontOf(el);
		if (!seen.has(f)) seen.set(f, new Set());
		for (const ch of text) if (ch > '\x7e' && !/\s/.test(ch)) seen.get(f).add(ch);
	};
	const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let n = walk.nextNode(); n; n = walk.nextNode()) {
		const el = n.parentElement;
		if (n.textContent.trim() && el.checkVisibility() && el.tagName !== 'OPTION') add(el, n.textContent);
	}
	for (const o of document.querySelectorAll('#lang option')) add(document.getElementById('lang'), o.textContent);
	add(document.body, document.title);
	const tofu = []; let chars = 0, control = false;
	for (const [font, set] of seen) {
		const missing = shot(font, '\u{10FFFD}');
		control = control || shot(font, '\u0378') === missing;
		for (const ch of set) { chars++; if (shot(font, ch) === missing) tofu.push(ch + ' (U+' + ch.codePointAt(0).toString(16) + ')'); }
	}
	const w = document.documentElement.clientWidth, overflow = [];
	if (document.documentElement.scrollWidth > w) overflow.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + w);
	for (const e of document.querySelectorAll('body *')) {
		const r = e.getBoundingClientRect();
		if (!r.width || getComputedStyle(e).display === 'inline') continue;
		const name = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className : '');
		if (r.left < -0.5 || r.right > w + 0.5) overflow.push(name + ' spans ' + Math.round(r.left) + '..' + Math.round(r.right) + ' of ' + w);
		else if (e.tagName !== 'SELECT' && e.tagName !== 'TEXTAREA' && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible')
			overflow.push(name + ' holds ' + e.scrollWidth + ' px in ' + e.clientWidth + ': ' + JSON.stringify(e.textContent.trim().slice(0, 40)));
	}
	return {tofu, overflow, chars, control};
})()`

// drawn is what pageProblems answers.
type drawn struct {
	Tofu     []string `json:"tofu"`
	Overflow []string `json:"overflow"`
	Chars    int      `json:"chars"`
	Control  bool     `json:"control"`
}

// TestBrowserPageLanguages renders the waiting page in every language it speaks
// (event.PageLanguages) on a narrow phone (320 px wide): the join view with the tickets left
// (page.unit), the wait view with its facts, the question before leaving, and "It's your turn"
// with the token shown. In each, every character shown, the window title and
// every language's name in the switch is drawn with a real glyph, not the missing-glyph box
// (scripts/services.sh installs fonts-noto-cjk for Japanese, Chinese and Korean), and nothing
// is wider than the screen or than its own box. The page of each language is saved as
// waiting-room-<lang>.png (see saveScreenshot).
func TestBrowserPageLanguages(t *testing.T) {
	exe := chromium(t)
	in := start(t, push.Config{Tick: 200 * time.Millisecond})
	// Paused: every join waits, so the wait view stays up; the tickets left show under it.
	putEvent(t, in, event.Event{ID: "ev", Name: "Spring concert", MaxActive: 1, Capacity: 5000, Paused: true,
		Page: event.Page{Unit: "tickets"}})
	// The tickets left in each language: its unit, plural form and digit grouping (Spanish
	// groups from five digits on; French with a narrow no-break space).
	// Open, with room and no redirect_url: a join is admitted at once, to "It's your turn".
	putEvent(t, in, event.Event{ID: "now", Name: "Spring concert", MaxActive: 100})
	stock := map[string]string{"en": "5,000 tickets left", "ko": "티켓 5,000장 남음", "ja": "チケット残り5,000枚", "zh-Hans": "剩余5,000张票",
		"es": "Quedan 5000 entradas", "fr": "5\u202f000 billets restants", "de": "Noch 5.000 Tickets", "pt": "Restam 5.000 ingressos"}

	bctx := browser(t, exe)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, actions...), what)
	}
	step("a narrow phone", chromedp.EmulateViewport(320, 640, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch),
		chromedp.Navigate(in.srv.URL+"/e/ev"), chromedp.WaitVisible(chromedp.ID("join")))
	check := func(lang, view string) {
		t.Helper()
		d := evalJS[drawn](t, bctx, pageProblems)
		require.True(t, d.Control, "%s, %s: the check sees a missing glyph (U+0378)", lang, view)
		require.Empty(t, d.Tofu, "%s, %s: characters drawn as missing glyphs (is fonts-noto-cjk installed? bash scripts/services.sh ensure_cjk_fonts)", lang, view)
		require.Empty(t, d.Overflow, "%s, %s: nothing wider than a 320 px screen", lang, view)
		require.Positive(t, d.Chars, "%s, %s: characters were checked", lang, view)
	}
	for _, lang := range event.PageLanguages {
		step(lang+": open",
			chromedp.Evaluate[chromedp.Void](`localStorage.clear()`),
			chromedp.Navigate(in.srv.URL+"/e/ev?lang="+lang),
			chromedp.WaitVisible(chromedp.ID("join")),
			waitJS(fmt.Sprintf(`document.documentElement.lang === %q && document.getElementById('event-name').textContent === 'Spring concert'`, lang), 10*time.Second),
			waitJS(`!document.getElementById('stock').hidden`, 10*time.Second))
		check(lang, "joining")
		require.Equal(t, stock[lang], evalJS[string](t, bctx, `document.getElementById('stock').textContent`), lang)
		step(lang+": join", chromedp.Click(chromedp.ID("join")), chromedp.WaitVisible(chromedp.ID("view-wait")),
			waitJS(`/\d/.test(document.getElementById('position').textContent) && /\d/.test(document.getElementById('behind').textContent)`, 15*time.Second))
		check(lang, "waiting")
		saveScreenshot(t, bctx, "waiting-room-"+lang+".png")
		step(lang+": leave asks", chromedp.Click(chromedp.ID("leave")), waitJS(`document.getElementById('leave-confirm').open`, 5*time.Second))
		check(lang, "asked before leaving")
		step(lang+": leave", chromedp.Click(chromedp.ID("leave-yes")), chromedp.WaitVisible(chromedp.ID("view-join")))
		step(lang+": its turn", chromedp.Navigate(in.srv.URL+"/e/now?lang="+lang), chromedp.WaitVisible(chromedp.ID("join")),
			chromedp.Click(chromedp.ID("join")), chromedp.WaitVisible(chromedp.ID("turn-number")),
			chromedp.Click(chromedp.CSS("#token-box summary")), chromedp.WaitVisible(chromedp.ID("token")))
		check(lang, "its turn")
	}
}

package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserEventForm drives the console's event form (issue 21, item 8) in headless
// Chromium, at a desktop's width and at a phone's: create an event with its schedule, page,
// challenge, limits and sale (If-None-Match: *, so an id taken is refused, not replaced), see
// the waiting page's preview follow the draft in each language the page speaks, get the API's
// problem next to the field it names, edit (a PATCH of what changed, If-Match), meet a change
// made meanwhile (412: the form shows both sides and writes nothing until told), and find
// every write in the API and in the console's audit trail.
func TestBrowserEventForm(t *testing.T) {
	exe := chromium(t)
	_, base := startConsole(t)
	for _, size := range []struct {
		name          string
		width, height int64
		phone         bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		t.Run(size.name, func(t *testing.T) {
			bctx := browser(t, exe)
			opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
			if size.phone {
				opts = []chromedp.EmulateViewportOption{chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch}
			}
			require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(size.width, size.height, opts...)))
			testEventForm(t, bctx, base, "spring-"+size.name, func() {
				// The form open, its preview drawn: nothing wider than the screen.
				overflow := jsText(t, bctx, `(() => {
					const w = document.documentElement.clientWidth;
					const wide = [...document.querySelectorAll('#editor *')].filter(e => e.getBoundingClientRect().right > w + 1 && e.offsetParent !== null);
					return document.documentElement.scrollWidth > w ? 'page ' + document.documentElement.scrollWidth + ' > ' + w :
						wide.map(e => e.tagName + '#' + e.id + '.' + e.className).join(' ');
				})()`)
				require.Empty(t, overflow, "at %d px nothing of the form is cut off or scrolls sideways", size.width)
				require.NoError(t, chromedp.Do(bctx, chromedp.ScrollIntoView(chromedp.ID("editor"))))
				saveScreenshot(t, bctx, "console-form-"+size.name+".png")
			})
		})
	}
}

func jsText(t *testing.T, bctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(bctx, chromedp.Evaluate[string](expr))
	require.NoError(t, err, expr)
	return s
}

func testEventForm(t *testing.T, bctx context.Context, base, id string, whileOpen func()) {
	text := func(expr string) string { t.Helper(); return jsText(t, bctx, expr) }
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Logf("the form: %s", text(`JSON.stringify({error: document.getElementById('form-error').textContent, result: document.getElementById('form-result').textContent,
				frame: (() => { try { const d = document.getElementById('preview-frame').contentDocument; return d.documentElement.lang + ' ' + d.body.innerText.slice(0, 300); } catch (e) { return String(e); } })(),
				src: document.getElementById('preview-frame').src})`))
			require.NoError(t, err, what)
		}
	}
	// set types into a field of the form as a person would: the value, then the input event.
	set := func(path, value string) chromedp.Action[chromedp.Void] {
		b, _ := json.Marshal(value)
		return waitJS(fmt.Sprintf(`(() => { const el = document.querySelector('[data-field="%s"]'); el.value = %s;
			el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, path, b),
			5*time.Second)
	}
	fieldError := func(path string) string {
		return fmt.Sprintf(`document.querySelector('.field-error[data-error-for="%s"]')`, path)
	}
	frame := `document.getElementById('preview-frame').contentDocument`

	step("log in", chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.CSS(`#login button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("new-event")))

	// Create.
	opens := time.Now().Add(2*time.Hour + 30*time.Second).Truncate(time.Second)
	step("a new event", chromedp.Click(chromedp.ID("new-event")),
		waitJS(`!document.getElementById('editor').hidden && document.getElementById('editor-save').textContent === 'Create the event'`, 10*time.Second))
	// Without an id, the form says so next to the field (PUT /v1/events/ would be a 404 about
	// the path).
	step("no event id", chromedp.Click(chromedp.ID("editor-save")),
		waitJS(`!`+fieldError("event_id")+`.hidden`, 10*time.Second))
	require.Contains(t, text(fieldError("event_id")+`.textContent`), "event_id is required")
	require.Equal(t, "true", text(`document.querySelector('[data-field="event_id"]').getAttribute('aria-invalid')`))
	step("its settings", chromedp.SendKeys(chromedp.CSS(`[data-field="event_id"]`), id),
		chromedp.SendKeys(chromedp.CSS(`[data-field="name"]`), "Spring sale"),
		set("max_active", "50"),
		set("opens_at", opens.Local().Format("2006-01-02T15:04:05")),
		set("page.title", "The spring sale"),
		set("page.message", "Doors at nine."),
		set("page.colors.accent", "#7a1f1f"),
		set("challenge.type", "pow"),
		set("challenge.difficulty", "12"),
		set("limits.joins_per_client", "3"),
		set("capacity", "200"))
	require.Contains(t, text(`document.getElementById('opens-in').textContent`), "Opens in 2 h 0 min")
	require.Contains(t, text(`document.getElementById('draw-note').textContent`), "drawn place")

	// The preview follows the draft, in each language the page speaks.
	langs := strings.Split(text(`Object.keys(window.waitroomText).join(',')`), ",")
	require.GreaterOrEqual(t, len(langs), 2)
	for _, lang := range langs {
		want := text(`window.waitroomText['` + lang + `'].your_place`)
		step("the preview in "+lang, chromedp.Click(chromedp.CSS(`#preview-langs button[data-lang="`+lang+`"]`)),
			waitJS(`(() => { try { const d = `+frame+`; return d.documentElement.lang === '`+lang+`' &&
				d.getElementById('event-name').textContent === 'The spring sale' &&
				d.getElementById('message').textContent === 'Doors at nine.' &&
				d.querySelector('[data-t="your_place"]').textContent === `+mustJSON(want)+` &&
				!d.getElementById('countdown').hidden; } catch (e) { return false; } })()`, 20*time.Second))
	}
	require.Equal(t, "rgb(122, 31, 31)", text(`getComputedStyle(`+frame+`.getElementById('progress-bar')).backgroundColor`),
		"the draft's accent colour on the page's progress bar")
	step("a change shows at once", set("page.title", "Spring!"),
		waitJS(frame+`.getElementById('event-name').textContent === 'Spring!'`, 10*time.Second))

	// The API's problem next to its field: white on yellow is unreadable.
	step("a refused colour", set("page.colors.accent", "#ffff00"), chromedp.Click(chromedp.ID("editor-save")),
		waitJS(`!`+fieldError("page.colors.accent")+`.hidden`, 20*time.Second))
	require.Contains(t, text(fieldError("page.colors.accent")+`.textContent`), "contrast")
	require.Contains(t, text(fieldError("page.colors.accent")+`.textContent`), "(invalid_field)")
	require.Equal(t, "true", text(`document.querySelector('[data-field="page.colors.accent"]').getAttribute('aria-invalid')`))
	code, _ := adminCall(t, "GET", base+"/v1/events/"+id, "")
	require.Equal(t, 404, code, "nothing was created")

	step("created", set("page.colors.accent", "#7a1f1f"), chromedp.Click(chromedp.ID("editor-save")),
		waitJS(`document.getElementById('form-result').textContent.startsWith('Created `+id+` (version 1)')`, 20*time.Second),
		waitJS(`document.getElementById('editor-save').textContent === 'Save the changes'`, 10*time.Second))
	code, ev := adminCall(t, "GET", base+"/v1/events/"+id, "")
	require.Equal(t, 200, code)
	require.Equal(t, "Spring sale", ev["name"])
	require.EqualValues(t, 50, ev["max_active"])
	require.EqualValues(t, 200, ev["capacity"])
	require.Equal(t, "pre_queue", ev["state"])
	got, err := time.Parse(time.RFC3339, ev["opens_at"].(string))
	require.NoError(t, err)
	require.True(t, got.Equal(opens), "opens_at %s, want %s", got, opens)
	require.Equal(t, map[string]any{"title": "Spring!", "message": "Doors at nine.", "colors": map[string]any{"accent": "#7a1f1f"}}, ev["page"])
	require.Equal(t, map[string]any{"type": "pow", "difficulty": 12.0}, ev["challenge"])
	require.EqualValues(t, 3, ev["limits"].(map[string]any)["joins_per_client"])
	step("the draw's commitment", waitJS(`/^Draw commitment \(published before the opening\): [0-9a-f]{64}$/.test(document.getElementById('draw-note').textContent)`, 10*time.Second))
	require.Equal(t, "/e/"+id, text(`new URL(document.getElementById('editor-page-link').href).pathname`), "a link to the event's page")

	// Edit: only what changed is sent, over the version read.
	step("edit", set("max_active", "60"), set("paused", ""),
		waitJS(`(() => { const c = document.querySelector('[data-field="paused"]'); c.checked = true; c.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, 5*time.Second),
		set("pause_message", "Back at ten."),
		chromedp.Click(chromedp.ID("editor-save")),
		waitJS(`document.getElementById('form-result').textContent.startsWith('Saved')`, 20*time.Second))
	require.Contains(t, text(`document.getElementById('form-result').textContent`), "(version 2)")
	_, ev = adminCall(t, "GET", base+"/v1/events/"+id, "")
	require.EqualValues(t, 60, ev["max_active"])
	require.Equal(t, true, ev["paused"])
	require.Equal(t, "Back at ten.", ev["pause_message"])
	require.Equal(t, "Spring!", ev["page"].(map[string]any)["title"], "what was not changed stays")
	step("the change in the audit trail", waitJS(
		`[...document.querySelectorAll('#audit-list li')].some(li => li.textContent.includes('event.patch') && li.textContent.includes('max_active 50 → 60'))`,
		20*time.Second))

	// A change made meanwhile: it is shown, not overwritten.
	step("the operator's draft", set("name", "Mine"))
	code, _ = adminCall(t, "PATCH", base+"/v1/events/"+id, `{"admit_rate":7}`)
	require.Equal(t, 200, code)
	step("the conflict", chromedp.Click(chromedp.ID("editor-save")),
		waitJS(`!document.getElementById('conflict').hidden`, 20*time.Second))
	require.Contains(t, text(`document.getElementById('conflict-text').textContent`), "version 3")
	require.Contains(t, text(`document.getElementById('conflict-list').textContent`), "admit_rate: 0 → 7")
	_, ev = adminCall(t, "GET", base+"/v1/events/"+id, "")
	require.Equal(t, "Spring sale", ev["name"], "nothing of the draft was written")
	step("apply mine to theirs", chromedp.Click(chromedp.ID("conflict-apply")),
		waitJS(`document.getElementById('form-result').textContent.startsWith('Saved name')`, 20*time.Second))
	_, ev = adminCall(t, "GET", base+"/v1/events/"+id, "")
	require.Equal(t, "Mine", ev["name"])
	require.EqualValues(t, 7, ev["admit_rate"], "their change kept")
	require.EqualValues(t, 4, ev["version"])
	_, audit := adminCall(t, "GET", base+"/v1/audit?event_id="+id, "")
	require.Len(t, audit["entries"], 4, "the create, the edit, their patch, the edit over it")

	// An id taken: never replaced.
	step("an id taken", chromedp.Click(chromedp.ID("new-event")),
		waitJS(`document.getElementById('editor-save').textContent === 'Create the event'`, 10*time.Second),
		chromedp.SendKeys(chromedp.CSS(`[data-field="event_id"]`), id),
		set("max_active", "5"),
		chromedp.Click(chromedp.ID("editor-save")),
		waitJS(`!`+fieldError("event_id")+`.hidden`, 20*time.Second))
	require.Contains(t, text(fieldError("event_id")+`.textContent`), "exists already")
	_, ev = adminCall(t, "GET", base+"/v1/events/"+id, "")
	require.EqualValues(t, 60, ev["max_active"], "left as it was")
	whileOpen()
	step("close", chromedp.Click(chromedp.ID("editor-cancel")), waitJS(`document.getElementById('editor').hidden`, 5*time.Second))
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

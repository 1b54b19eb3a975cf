// Package web serves the pages people see: the waiting room of an event (GET /e/{event_id})
// and the operator console (GET /admin), which reads the admin API served by httpapi and
// saleapi (events, their history and forecasts, campaigns, instances, the audit trail) and acts
// through it after a confirmation; it draws its charts itself as SVG. The assets are embedded
// in the binary (no build step, no CDN); the pages talk only to the instance's own HTTP API and
// push endpoints.
//
// The waiting-room page joins the line (POST /v1/events/{id}/tickets), keeps the ticket id in
// localStorage under "waitroom:<event_id>" (so reloads and other tabs keep the place), follows
// the ticket live over WebSocket, falling back to Server-Sent Events and then to polling as
// poll_after_s says, reports the page's visibility to the hub, and on admission sends the
// person on to the event's redirect_url with ?waitroom_token=<admission token> appended (or,
// when the event has none, says "It's your turn" with the person's number, the token only on
// request).
//
// The console's event form (event-form.js) shows the waiting page itself as its preview:
// GET /e/{event_id}?preview=1, framed by the console's origin only, drawn from the draft the
// form posts to it (room.js's startPreview), joining nothing.
package web

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/language"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/pagetemplate"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/report"
)

//go:embed assets
var assetFS embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

var assets = loadAssets()

func loadAssets() map[string]asset {
	m := map[string]asset{}
	err := fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		m[strings.TrimPrefix(p, "assets/")] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("web: embedded assets: " + err.Error()) // the files are compiled in; cannot happen
	}
	return m
}

// Route patterns served by the package.
const (
	RouteRoom   = "GET /e/{event_id}"
	RouteAdmin  = "GET /admin"
	RouteAssets = "GET /assets/{name}"
	// RoutePageCSS is an event's own style sheet (page.css), linked by its page.
	RoutePageCSS = "GET /e/{event_id}/page.css"
)

// assetMaxAge is how long browsers may cache the scripts and styles (s). Short, because the
// names are not content-hashed: a new release is picked up within five minutes.
const assetMaxAge = 300

// Events is what the pages read of the events (the registry).
type Events interface {
	// Get returns an event, or an error matching registry.ErrNotFound.
	Get(ctx context.Context, id string) (event.Event, error)
}

// Mux is where the pages are registered (the API's mux).
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Mount registers the pages and their assets on mux.
func Mount(mux Mux, events Events) {
	s := &site{events: events, now: time.Now}
	mux.Handle(RouteRoom, http.HandlerFunc(s.room))
	mux.Handle(RouteAdmin, http.HandlerFunc(s.admin))
	mux.Handle(RouteAssets, http.HandlerFunc(s.asset))
	mux.Handle(RoutePageCSS, http.HandlerFunc(s.pageCSS))
}

type site struct {
	events    Events
	templates templates
	now       func() time.Time // the clock the page's foot is written by (the draw before or after the opening)
}

// pageHeaders sets the headers of an HTML page: a strict Content-Security-Policy (only this
// origin's scripts, styles and connections, WebSocket included; images also from imgOrigins,
// each an origin imageOrigin wrote), no framing, no sniffing. Framing is refused twice: by the policy's
// frame-ancestors and by X-Frame-Options: DENY, which browsers without CSP level 2 (and
// proxies that strip or rewrite the policy) still honour (issue 20, item 16).
func pageHeaders(w http.ResponseWriter, r *http.Request, imgOrigins ...string) {
	h := w.Header()
	img := "img-src 'self' data:"
	for _, o := range imgOrigins {
		img += " " + o
	}
	// The page's own WebSocket, named for browsers whose 'self' does not cover ws: and wss:
	// (CSP 2). Only a Host that is a host[:port]: net/http lets ; ' * , through, which would
	// add directives or wildcards to the policy.
	connect := "connect-src 'self'"
	if hostPattern.MatchString(r.Host) {
		connect += " ws://" + r.Host + " wss://" + r.Host
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+img+"; "+
		connect+"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// notFound answers a waiting room that does not exist (an id that is none, or no such event)
// with a 404 page in the visitor's language (pageLanguage without an event's default): a
// person followed a link, so a page, not a problem.
func (s *site) notFound(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := notFoundPage.Execute(&b, roomView{Lang: pageLanguage(r, "")}); err != nil {
		// Only a bug in notfound.html gets here.
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "not_found", "no such waiting room"))
		return
	}
	w.Header().Set("Vary", "Accept-Language")
	s.write(w, r, asset{body: b.Bytes(), contentType: "text/html; charset=utf-8"}, http.StatusNotFound)
}

func (s *site) write(w http.ResponseWriter, r *http.Request, a asset, code int, imgOrigins ...string) {
	pageHeaders(w, r, imgOrigins...)
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}

// room serves the waiting room of an event: 404 (a page saying so) when the event does not
// exist. The page comes written in the language pageLanguage picks (its <html lang>, which the
// script follows), with the event's title (heading, window title, meta description) and the
// line's order in its foot, so that it reads right before its script runs; the script reads
// the rest from the API. Its policy allows images from the origin of the event's
// page.logo_url. With ?preview=1 it is the console's preview (see preview).
func (s *site) room(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	if !event.ValidID(id) {
		s.notFound(w, r)
		return
	}
	if r.URL.Query().Get("preview") == "1" {
		s.preview(w, r)
		return
	}
	e, err := s.events.Get(r.Context(), id)
	if errors.Is(err, registry.ErrNotFound) {
		s.notFound(w, r)
		return
	}
	// Other errors (the database unreachable): serve the page without the event; it retries
	// the API itself.
	w.Header().Set("Vary", "Accept-Language")
	v := roomView{Lang: pageLanguage(r, e.Page.Language), Order: orderKey(e, s.now())}
	images := []string{imageOrigin(e.Page.LogoURL)}
	if err == nil {
		v.Title, v.Message = cmp.Or(e.Page.Title, e.Name, e.ID), e.Page.Message
		if e.Page.CSS != "" {
			v.CSS = "/e/" + e.ID + "/page.css?v=" + strconv.FormatInt(e.Version, 10)
		}
		if tpl := s.templates.get(e.ID, e.Page.Template); tpl != nil {
			before, after := tpl.Render(v.Title)
			// Safe as HTML: pagetemplate wrote it from its allow-list, escaping every value.
			v.Before, v.After = template.HTML(before), template.HTML(after)
			for _, o := range tpl.ImageOrigins() {
				images = append(images, imageOrigin(o))
			}
		}
	}
	var b bytes.Buffer
	if err := roomPage.Execute(&b, v); err != nil {
		// Only a bug in room.html or roomView gets here (the values are plain strings).
		httpjson.WriteProblem(w, httpjson.NewProblem(500, "internal_error", "the waiting page could not be written"))
		return
	}
	s.write(w, r, asset{body: b.Bytes(), contentType: "text/html; charset=utf-8"}, http.StatusOK, origins(images)...)
}

// origins is the list of image origins without the empty and the repeated ones.
func origins(list []string) []string {
	var out []string
	for _, o := range list {
		if o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// templates keeps each event's page.template checked and ready (pagetemplate.Parse), so that
// a crowd's page loads do not parse it again; an event's entry is replaced when its template
// changes. A stored template that no longer passes (written to the database by hand, or rules
// tightened since) is not used: the page is served in its plain layout (fail closed).
type templates struct {
	mu   sync.Mutex
	byID map[string]parsedTemplate
}

type parsedTemplate struct {
	src string
	tpl *pagetemplate.Template // nil when src did not pass
}

// get returns event id's template src, checked, or nil for none (or one that does not pass).
func (c *templates) get(id, src string) *pagetemplate.Template {
	if src == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byID[id]; ok && p.src == src {
		return p.tpl
	}
	tpl, err := pagetemplate.Parse(src)
	if err != nil {
		tpl = nil
	}
	if c.byID == nil {
		c.byID = map[string]parsedTemplate{}
	}
	c.byID[id] = parsedTemplate{src: src, tpl: tpl}
	return tpl
}

// pageCSS serves an event's page.css (GET /e/{event_id}/page.css): text/css with an ETag, not
// to be sniffed as anything else; 404 when the event has none, or does not exist. The page
// links it with ?v=<the event's version>, so a new sheet reaches a new page at once.
func (s *site) pageCSS(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	if !event.ValidID(id) {
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "not_found", "no such event"))
		return
	}
	e, err := s.events.Get(r.Context(), id)
	switch {
	case err == nil && e.Page.CSS != "":
	case err == nil || errors.Is(err, registry.ErrNotFound):
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "not_found", "the event has no page.css"))
		return
	default:
		w.Header().Set("Retry-After", "1")
		httpjson.WriteProblem(w, httpjson.NewProblem(503, "store_unavailable", "the event could not be read; retry shortly"))
		return
	}
	sum := sha256.Sum256([]byte(e.Page.CSS))
	tag := `"` + hex.EncodeToString(sum[:8]) + `"`
	h := w.Header()
	h.Set("Content-Type", "text/css; charset=utf-8")
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(assetMaxAge))
	h.Set("ETag", tag)
	h.Set("X-Content-Type-Options", "nosniff")
	if httpjson.NotModified(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(e.Page.CSS)))
	_, _ = io.WriteString(w, e.Page.CSS)
}

// roomPage is the waiting page (assets/room.html), an html/template executed with a roomView:
// every value is escaped for where it lands, so an event's title cannot end an element or an
// attribute.
var roomPage = template.Must(template.New("room.html").Parse(string(assets["room.html"].body)))

// notFoundPage is the 404 page of a waiting room that does not exist (assets/notfound.html),
// executed with a roomView of the visitor's language only.
var notFoundPage = template.Must(template.New("notfound.html").Parse(string(assets["notfound.html"].body)))

// words is the waiting page's catalogue (assets/room-text.js, strict JSON after
// "window.waitroomText ="): language -> key -> text. The server writes the page's first words
// with it; the script, the same catalogue, takes over.
var words = loadWords()

func loadWords() map[string]map[string]string {
	const mark = "window.waitroomText ="
	s := string(assets["room-text.js"].body)
	i := strings.Index(s, mark)
	var c map[string]map[string]string
	if i < 0 || json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimSpace(s[i+len(mark):]), ";")), &c) != nil || c["en"] == nil {
		panic("web: assets/room-text.js does not hold the catalogue as JSON after " + mark) // compiled in; TestCatalogue reads it too
	}
	return c
}

// roomView is what the waiting page is written with.
type roomView struct {
	Lang  string // one of event.PageLanguages
	Title string // the event's page.title, else its name, else its id; "" when it could not be read
	// Order is the catalogue's key of the sentence that says how the line is ordered (orderKey).
	Order string
	// Message is the operator's page.message ("" for none).
	Message string
	// CSS is the address of the event's page.css, "" for none.
	CSS string
	// Before and After are the operator's page.template around the page's card (both "" for
	// the plain layout).
	Before, After template.HTML
}

// T is the catalogue's text for key in the page's language (English when it lacks one).
func (v roomView) T(key string) string {
	if s, ok := words[v.Lang][key]; ok {
		return s
	}
	return words["en"][key]
}

// WindowTitle is the window's title: "<title> – waiting room", in the page's language.
func (v roomView) WindowTitle() string {
	if v.Title == "" {
		return v.T("eyebrow")
	}
	return strings.ReplaceAll(v.T("window_title"), "{name}", v.Title)
}

// Description is the page's <meta name="description"> (what a link to it shows in a chat or a
// search result): the operator's message, else a sentence about the line.
func (v roomView) Description() string {
	if v.Message != "" {
		return v.Message
	}
	if v.Title == "" {
		// No name to give (the console's preview, or an event that could not be read): the
		// page's own first sentence, not "Waiting room of Waiting room".
		return v.T("join_text")
	}
	return strings.ReplaceAll(v.T("meta_description"), "{name}", v.Title)
}

// orderKey names how the event's line is ordered, as the page's foot says it: a drawn
// pre-queue (prequeue_order random with an opens_at: the places of everyone who joined before
// the opening are drawn, docs/draw.md), before or after its opening, else first come, first
// served. room.js (orderKey) says the same from the API's view of the event.
func orderKey(e event.Event, now time.Time) string {
	switch {
	case e.PrequeueOrder == event.OrderArrival || e.OpensAt.IsZero():
		return "order_arrival"
	case now.Before(e.OpensAt):
		return "order_draw_before"
	}
	return "order_draw_after"
}

// preview serves /e/{event_id}?preview=1, the waiting page as the console's event form shows
// it: the page itself (room.js draws it from the draft the console posts, joining nothing),
// for an event that may not exist yet. Its policy is the page's but for two things: it may be
// framed by this origin (the console) and no other, and its images may come from the origin of
// ?logo= (the draft's page.logo_url, which the console gives: the policy of a page is fixed
// when it loads, so a new logo origin reloads the frame).
func (s *site) preview(w http.ResponseWriter, r *http.Request) {
	lang := event.PageLanguages[0]
	if q := r.URL.Query().Get("lang"); slices.Contains(event.PageLanguages, q) {
		lang = q
	}
	// The draft's title, order and look are drawn by room.js from what the console posts.
	var b bytes.Buffer
	if err := roomPage.Execute(&b, roomView{Lang: lang, Order: "order_arrival"}); err != nil {
		httpjson.WriteProblem(w, httpjson.NewProblem(500, "internal_error", "the waiting page could not be written"))
		return
	}
	a := asset{body: b.Bytes(), contentType: "text/html; charset=utf-8"}
	writeWithPolicy(w, r, a, imageOrigin(r.URL.Query().Get("logo")), func(h http.Header) {
		h.Set("Content-Security-Policy", strings.Replace(h.Get("Content-Security-Policy"), "frame-ancestors 'none'", "frame-ancestors 'self'", 1))
		h.Set("X-Frame-Options", "SAMEORIGIN")
		h.Set("Cache-Control", "no-store")
	})
}

// writeWithPolicy writes page a (200) with the pages' headers (pageHeaders) as policy changes
// them.
func writeWithPolicy(w http.ResponseWriter, r *http.Request, a asset, imgOrigin string, policy func(h http.Header)) {
	pageHeaders(w, r, origins([]string{imgOrigin})...)
	h := w.Header()
	policy(h)
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}

// pageMatcher matches Accept-Language against the languages the page speaks.
var pageMatcher = language.NewMatcher(func() []language.Tag {
	tags := make([]language.Tag, len(event.PageLanguages))
	for i, l := range event.PageLanguages {
		tags[i] = language.MustParse(l)
	}
	return tags
}())

// pageLanguage is the language of the waiting page (one of event.PageLanguages): ?lang= when
// it names one, else the best match of Accept-Language (RFC 9110 12.5.4, matched by
// golang.org/x/text/language, so ko-KR, zh-CN, pt-PT, es-419 or a lower q for English still
// count; zh-TW gets Simplified Chinese, a low but real match, and Galician Spanish), else the
// event's page.language, else English.
func pageLanguage(r *http.Request, eventDefault string) string {
	if q := r.URL.Query().Get("lang"); slices.Contains(event.PageLanguages, q) {
		return q
	}
	if tags, _, err := language.ParseAcceptLanguage(r.Header.Get("Accept-Language")); err == nil && len(tags) > 0 {
		if _, i, conf := pageMatcher.Match(tags...); conf != language.No {
			return event.PageLanguages[i]
		}
	}
	if eventDefault != "" {
		return eventDefault
	}
	return event.PageLanguages[0]
}

// hostPattern is what a logo's host may be to enter the Content-Security-Policy (a name, an
// IPv4 or a bracketed IPv6 address, a port): nothing that could end the directive.
var hostPattern = regexp.MustCompile(`^[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)

// imageOrigin is the origin of a logo URL for img-src ("" when there is none, or when it
// could not be written there safely).
func imageOrigin(logo string) string {
	u, err := url.Parse(logo)
	if logo == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || !hostPattern.MatchString(u.Host) {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// admin serves the operator console. Its policy is the pages' with two additions: the inline
// style sheet of the report after the sale (package report), allowed by its hash, which the
// console shows in a frame of srcdoc (such a frame keeps this page's policy); and frames of this
// origin, the waiting page's preview in the event form.
func (s *site) admin(w http.ResponseWriter, r *http.Request) {
	writeWithPolicy(w, r, assets["admin.html"], "", func(h http.Header) {
		csp := strings.Replace(h.Get("Content-Security-Policy"), "style-src 'self'", "style-src 'self' "+report.StyleHash, 1)
		h.Set("Content-Security-Policy", csp+"; frame-src 'self'") // the waiting page's preview (preview)
	})
}

// asset serves an embedded script, style sheet or image, with an ETag.
func (s *site) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a, ok := assets[name]
	if !ok || strings.HasSuffix(name, ".html") {
		httpjson.WriteProblem(w, httpjson.NewProblem(404, "not_found", "no asset "+name))
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(assetMaxAge))
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if httpjson.NotModified(r, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	_, _ = w.Write(a.body)
}

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
// person on to the event's redirect_url with ?waitroom_token=<admission token> appended (or
// shows the token when the event has no redirect_url).
//
// The console's event form (event-form.js) shows the waiting page itself as its preview:
// GET /e/{event_id}?preview=1, framed by the console's origin only, drawn from the draft the
// form posts to it (room.js's startPreview), joining nothing.
package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/text/language"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
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
	s := &site{events: events}
	mux.Handle(RouteRoom, http.HandlerFunc(s.room))
	mux.Handle(RouteAdmin, http.HandlerFunc(s.admin))
	mux.Handle(RouteAssets, http.HandlerFunc(s.asset))
}

type site struct {
	events Events
}

// pageHeaders sets the headers of an HTML page: a strict Content-Security-Policy (only this
// origin's scripts, styles and connections, WebSocket included; images also from imgOrigin
// when not ""), no framing, no sniffing. Framing is refused twice: by the policy's
// frame-ancestors and by X-Frame-Options: DENY, which browsers without CSP level 2 (and
// proxies that strip or rewrite the policy) still honour (issue 20, item 16).
func pageHeaders(w http.ResponseWriter, r *http.Request, imgOrigin string) {
	h := w.Header()
	host := r.Host
	img := "img-src 'self' data:"
	if imgOrigin != "" {
		img += " " + imgOrigin
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+img+"; "+
		"connect-src 'self' ws://"+host+" wss://"+host+"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

func (s *site) page(w http.ResponseWriter, r *http.Request, name string, code int) {
	s.write(w, r, assets[name], code, "")
}

func (s *site) write(w http.ResponseWriter, r *http.Request, a asset, code int, imgOrigin string) {
	pageHeaders(w, r, imgOrigin)
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}

// room serves the waiting room of an event: 404 (a page saying so) when the event does not
// exist; the page reads everything else from the API. The page comes in the language
// pageLanguage picks (its <html lang>, which the script follows), and its policy allows
// images from the origin of the event's page.logo_url. With ?preview=1 it is the console's
// preview (see preview).
func (s *site) room(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	if !event.ValidID(id) {
		s.page(w, r, "notfound.html", http.StatusNotFound)
		return
	}
	if r.URL.Query().Get("preview") == "1" {
		s.preview(w, r)
		return
	}
	e, err := s.events.Get(r.Context(), id)
	if errors.Is(err, registry.ErrNotFound) {
		s.page(w, r, "notfound.html", http.StatusNotFound)
		return
	}
	// Other errors (the database unreachable): serve the page as it is; it retries the API
	// itself.
	w.Header().Set("Vary", "Accept-Language")
	a := assets["room.html"]
	a.body = bytes.Replace(a.body, []byte(`<html lang="en">`), []byte(`<html lang="`+pageLanguage(r, e.Page.Language)+`">`), 1)
	s.write(w, r, a, http.StatusOK, imageOrigin(e.Page.LogoURL))
}

// preview serves /e/{event_id}?preview=1, the waiting page as the console's event form shows
// it: the page itself (room.js draws it from the draft the console posts, joining nothing),
// for an event that may not exist yet. Its policy is the page's but for two things: it may be
// framed by this origin (the console) and no other, and its images may come from the origin of
// ?logo= (the draft's page.logo_url, which the console gives: the policy of a page is fixed
// when it loads, so a new logo origin reloads the frame).
func (s *site) preview(w http.ResponseWriter, r *http.Request) {
	a := assets["room.html"]
	lang := event.PageLanguages[0]
	if q := r.URL.Query().Get("lang"); slices.Contains(event.PageLanguages, q) {
		lang = q
	}
	a.body = bytes.Replace(a.body, []byte(`<html lang="en">`), []byte(`<html lang="`+lang+`">`), 1)
	writeWithPolicy(w, r, a, imageOrigin(r.URL.Query().Get("logo")), func(h http.Header) {
		h.Set("Content-Security-Policy", strings.Replace(h.Get("Content-Security-Policy"), "frame-ancestors 'none'", "frame-ancestors 'self'", 1))
		h.Set("X-Frame-Options", "SAMEORIGIN")
		h.Set("Cache-Control", "no-store")
	})
}

// writeWithPolicy writes page a (200) with the pages' headers (pageHeaders) as policy changes
// them.
func writeWithPolicy(w http.ResponseWriter, r *http.Request, a asset, imgOrigin string, policy func(h http.Header)) {
	pageHeaders(w, r, imgOrigin)
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
// golang.org/x/text/language, so ko-KR or a lower q for English still count), else the
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
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	_, _ = w.Write(a.body)
}

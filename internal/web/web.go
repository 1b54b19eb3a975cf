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
package web

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/registry"
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
// origin's scripts, styles and connections, WebSocket included), no framing, no sniffing.
func pageHeaders(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	host := r.Host
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self' ws://"+host+" wss://"+host+"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

func (s *site) page(w http.ResponseWriter, r *http.Request, name string, code int) {
	a := assets[name]
	pageHeaders(w, r)
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}

// room serves the waiting room of an event: 404 (a page saying so) when the event does not
// exist; the page reads everything else from the API.
func (s *site) room(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	if !event.ValidID(id) {
		s.page(w, r, "notfound.html", http.StatusNotFound)
		return
	}
	if _, err := s.events.Get(r.Context(), id); errors.Is(err, registry.ErrNotFound) {
		s.page(w, r, "notfound.html", http.StatusNotFound)
		return
	}
	// Other errors (the database unreachable): serve the page; it retries the API itself.
	s.page(w, r, "room.html", http.StatusOK)
}

func (s *site) admin(w http.ResponseWriter, r *http.Request) {
	s.page(w, r, "admin.html", http.StatusOK)
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
